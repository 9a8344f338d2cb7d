#!/usr/bin/env python3
# Makes tests/data/zb-authors-orders.jsonl: the zero-bubble authors' own greedy scheduler
# (initial_solution / manual_order of scheduler/zb.py in sail-sg/zero-bubble-pipeline-parallelism,
# commit 39f2c186a27580b7051eb51e0f651e1efd0a8170) on a grid of S, M, memory limits and transfer
# delays with F = I = W = 1, memory +1 per F, 0 per I, -1 per W (pipetab's input_grad_frees 0).
# Each line: the case, the authors' longest span, and each stage's passes in the order of their
# predicted completion times. Their file is executed from a checkout, not copied here:
#   python3 tests/data/zb-authors-orders.py PATH/TO/zb.py > tests/data/zb-authors-orders.jsonl
# (torch and pulp, which zb.py imports but manual_order does not use, are stubbed).
import json
import sys
import types
from dataclasses import dataclass
from typing import List, Optional

sys.modules['torch'] = types.ModuleType('torch')
sys.modules['torch'].Tensor = object  # an annotation only
sys.modules['pulp'] = types.ModuleType('pulp')


@dataclass
class GraphConfig:  # the fields of their scheduler/graph.py GraphConfig that manual_order reads
    mem_f: List[float] = None
    mem_b: List[float] = None
    mem_w: List[float] = None
    max_mem: Optional[List[float]] = None
    cost_f: List[float] = None
    cost_b: List[float] = None
    cost_w: List[float] = None
    cost_comm: float = 0.0
    print_scaling: int = 1
    max_chunks: int = 1
    n_stages: int = None
    n_micro: int = None


graph_module = types.ModuleType('graph')
graph_module.GraphConfig, graph_module.ScheduledNode, graph_module.FuncType = GraphConfig, object, object
package = 'megatron.core.pipeline_parallel.zerobubble.scheduler'
parts = package.split('.')
for i in range(1, len(parts) + 1):
    sys.modules['.'.join(parts[:i])] = types.ModuleType('.'.join(parts[:i]))
sys.modules[package + '.graph'] = graph_module
namespace = {}
exec(compile(open(sys.argv[1]).read(), 'zb.py', 'exec'), namespace)
Graph, initial_solution = namespace['Graph'], namespace['initial_solution']

for S in [2, 3, 4, 6, 8, 16]:
    for M in sorted({S, S + 1, 2 * S, 3 * S}):
        for limit in sorted({S, 2 * S - 1, 2 * S}):
            for comm in [0.0, 0.5, 1.0]:
                config = GraphConfig(mem_f=[1.0] * S, mem_b=[0.0] * S, mem_w=[-1.0] * S,
                                     max_mem=[float(limit)] * S, cost_f=[1.0] * S,
                                     cost_b=[1.0] * S, cost_w=[1.0] * S, cost_comm=comm,
                                     n_stages=S, n_micro=M)
                graph = Graph.build_graph(S, M, config)
                span, _, end = initial_solution(graph, print_result=False)
                rows = []
                for stage in range(S):
                    passes = sorted((end[graph.get_id(k, stage, mb)], k, mb)
                                    for k in range(3) for mb in range(M))
                    rows.append(' '.join('FIW'[k] + str(mb) for _, k, mb in passes))
                print(json.dumps({'S': S, 'M': M, 'limit': limit, 'comm': comm, 'span': span,
                                  'rows': rows}))
