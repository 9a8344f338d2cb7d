#!/usr/bin/env python3
# Makes tests/data/po-orders.jsonl: the orders of PipeOffload's uniform repeating schedule (the
# PO-H and PO-F runs of Wan et al., ICML 2025, arXiv 2503.01328 §3.2) as the authors' runtime
# builds them: GroupBuildingBlockScheduler of scheduler/group_interleaved_1f1b.py in
# sail-sg/zero-bubble-pipeline-parallelism (commit 39f2c186a27580b7051eb51e0f651e1efd0a8170) with
# group_size 1 and min_group_size ⌈S/2⌉, the value their create_schedule takes when F, B and W
# cost the same. Each line: S, M, v and each device's passes in order as "<kind><microbatch>.<chunk>"
# (kind F, B for the input gradient, W). Their file is executed from a checkout, not copied here:
#   python3 tests/data/po-orders.py PATH/TO/group_interleaved_1f1b.py > tests/data/po-orders.jsonl
import contextlib
import io
import json
import sys

namespace = {}
exec(compile(open(sys.argv[1]).read(), 'group_interleaved_1f1b.py', 'exec'), namespace)
Scheduler = namespace['GroupBuildingBlockScheduler']

for S in [1, 2, 3, 4, 5, 6, 7, 8, 11, 16]:
    for v in [1, 2, 3, 4, 5] if S < 11 else [2, 3]:
        for M in sorted({1, 2, S, 2 * S + 1}):
            with contextlib.redirect_stdout(io.StringIO()):
                scheduler = Scheduler(S, M, chunk_num=v, min_group_size=(S + 1) // 2, group_size=1)
            rows = []
            for row in scheduler.get_schedule():
                rows.append(' '.join(f'{p.type.value}{p.micro}.{p.chunk}' for p in row if not p.is_nan()))
            print(json.dumps({'S': S, 'M': M, 'v': v, 'rows': rows}))
