#!/usr/bin/env python3
# Makes tests/data/zb-authors-v-orders.jsonl: the zero-bubble authors' V-shape scheduler
# (PipelineGraph.try_v_schedule of scheduler/zbv.py in sail-sg/zero-bubble-pipeline-parallelism,
# commit 39f2c186a27580b7051eb51e0f651e1efd0a8170), keeping the best of its four fill_b × fill_f
# runs by the largest bubble as their create_schedule does, on a grid of S, M, pass costs,
# transfer delays and memory limits; memory +1 per forward, 0 per input gradient, -1 per weight
# gradient (a forward of one stage, half a device share). Each line: the case, the largest
# bubble, and each device's passes in order as "cat chunk microbatch" (cat 0 F, 1 B, 2 W; the
# backward passes count their chunks from the turn of the V). Their file is executed from a
# checkout, not copied here:
#   python3 tests/data/zb-authors-v-orders.py PATH/TO/zbv.py > tests/data/zb-authors-v-orders.jsonl
import json
import sys
import types

package = 'megatron.core.pipeline_parallel.zerobubble.scheduler'
parts = package.split('.')
for i in range(1, len(parts) + 1):
    sys.modules['.'.join(parts[:i])] = types.ModuleType('.'.join(parts[:i]))
graph_module = types.ModuleType('graph')
for name in ['ScheduledNode', 'F', 'B', 'W', 'FuncType']:
    setattr(graph_module, name, object)
sys.modules[package + '.graph'] = graph_module
namespace = {}
exec(compile(open(sys.argv[1]).read(), 'zbv.py', 'exec'), namespace)
PipelineGraph = namespace['PipelineGraph']

for S in [2, 3, 4, 6, 8]:
    for M in sorted({S, 2 * S, 3 * S}):
        for f, b, w in [(1, 1, 1), (2, 3, 1)]:
            for comm in [0, 0.5, 1]:
                for limit in sorted({2 * S, 2 * S - 1, S + 2}):
                    case = {'S': S, 'M': M, 'f': f, 'b': b, 'w': w, 'comm': comm, 'limit': limit}
                    graph = PipelineGraph(S, M, f, b, w, comm, 1, 0, -1, max_mem=limit)
                    best = None
                    try:
                        for fill_b in [True, False]:
                            for fill_f in [True, False]:
                                schedule, _, bubble = graph.try_v_schedule(fill_b=fill_b, fill_f=fill_f)
                                if best is None or bubble < best[1]:
                                    best = (schedule, bubble)
                    except AssertionError:
                        case['error'] = 'assertion'
                        print(json.dumps(case))
                        continue
                    case['bubble'] = best[1]
                    case['rows'] = [' '.join(f'{c}{k}{m}' for c, k, m in row) for row in best[0]]
                    print(json.dumps(case))
