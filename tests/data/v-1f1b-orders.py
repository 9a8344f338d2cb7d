#!/usr/bin/env python3
# Makes tests/data/v-1f1b-orders.jsonl: the zero-bubble authors' V-shape 1F1B (`--enable-1f1b-v`,
# create_schedule of megatron/core/pipeline_parallel/zerobubble/scheduler/v1f1b.py in
# sail-sg/zero-bubble-pipeline-parallelism, commit 39f2c186a27580b7051eb51e0f651e1efd0a8170),
# called as their runtime calls it: a GraphConfig with the stage count, the microbatch count, the
# pass costs and the transfer delay. Their file is executed from a checkout, not copied here:
#   python3 tests/data/v-1f1b-orders.py PATH/TO/v1f1b.py > tests/data/v-1f1b-orders.jsonl
# e.g. with the mirror's file written out first:
#   git -C REPO show HEAD:megatron/core/pipeline_parallel/zerobubble/scheduler/v1f1b.py > /tmp/v1f1b.py
#   python3 tests/data/v-1f1b-orders.py /tmp/v1f1b.py > tests/data/v-1f1b-orders.jsonl
# Each line: {"S", "M", "rows"}, rows[d] = device d's passes in order as pipetab's (PyTorch's)
# action tokens "<stage><F|B><microbatch>", stage = their layer_group_idx (device d holds stages d
# and 2S-1-d; B is a whole backward, their BW). Every case is planned under two different cost
# sets (f, b, w, comm) and the script stops unless both orders are equal: the costs only feed a
# makespan estimate the file discards, so the order depends on S and M alone. Their runtime
# requires S >= 2 (pipeline parallelism enabled); S = 1 is included because the file plans it too.
import json
import sys
import types

package = 'megatron.core.pipeline_parallel.zerobubble.scheduler'
parts = package.split('.')
for i in range(1, len(parts) + 1):
    sys.modules['.'.join(parts[:i])] = types.ModuleType('.'.join(parts[:i]))


class ScheduledNode:  # stands in for graph.ScheduledNode: keeps the fields it is given
    def __init__(self, **fields):
        self.__dict__.update(fields)


graph_module = types.ModuleType('graph')
graph_module.ScheduledNode = ScheduledNode
graph_module.GraphConfig = object
graph_module.F = 'F'
graph_module.BW = 'BW'
sys.modules[package + '.graph'] = graph_module
namespace = {}
exec(compile(open(sys.argv[1]).read(), 'v1f1b.py', 'exec'), namespace)
create_schedule = namespace['create_schedule']


def rows(S, M, f, b, w, comm):
    config = types.SimpleNamespace(n_stages=S, n_micro=M, cost_f=[f], cost_b=[b], cost_w=[w],
                                   cost_comm=comm)
    out = []
    for device, nodes in enumerate(create_schedule(config)):
        tokens = []
        for n in nodes:
            assert n.stage == device
            assert n.layer_group_idx == (device if n.chunk == 0 else 2 * S - 1 - device)
            tokens.append(f"{n.layer_group_idx}{'F' if n.type == 'F' else 'B'}{n.microbatch}")
        out.append(' '.join(tokens))
    return out


cases = []
for S in range(1, 9):
    cases += [(S, M) for M in range(1, 4 * S + 1)]
for S in [12, 16]:
    cases += [(S, M) for M in sorted({1, 2, S // 2, S - 1, S, S + 1, 3 * S // 2, 2 * S - 1,
                                      2 * S, 2 * S + 3, 3 * S, 4 * S})]
cases += [(32, M) for M in [32, 33, 64]]

for S, M in cases:
    order = rows(S, M, 1, 1, 1, 0)
    if rows(S, M, 2, 3, 1, 0.5) != order:
        sys.exit(f'S={S} M={M}: the order depends on the costs')
    print(json.dumps({'S': S, 'M': M, 'rows': order}))
