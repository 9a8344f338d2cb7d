#!/usr/bin/env python3
"""GPU idle time per synchronized pipeline step, in eager PyTorch (issue 22, point 1).

Megatron-LM's pipeline schedules synchronize the device after every batched send/receive
(p2p_communication.py: batch_isend_irecv, wait, torch.cuda.synchronize when batch_p2p_sync, the
default). After such a synchronization the host has to issue the next step's kernels before the
GPU can run them, so the GPU idles for a while at every step, and a step whose kernels take less
GPU time than the host needs to issue them runs at the host's pace. This probe measures both on
one GPU with a stage of GPT blocks (the blocks of modern_probe.py):

  * gap_us: GPU idle time between the end of one step and the start of the next when every step
    (a forward, or a backward) is followed by torch.cuda.synchronize() — CUDA events recorded
    around each step, gap = elapsed(end of step i, start of step i+1);
  * step_ms_sync / step_ms_ahead: a step's GPU time with a synchronization after each step, and
    with the host free to run ahead (no synchronization between steps);
  * kernels: kernels per step (torch.profiler), so host time per kernel can be read off where the
    host is the bottleneck.

Writes OUT_DIR/step-gap.csv. Usage: step_gap_probe.py OUT_DIR
"""
import csv
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modern_probe import Block, count_gpu_ops  # noqa: E402

BF16 = torch.bfloat16


def measure(hidden, seq, layers, steps=24):
    torch.manual_seed(0)
    blocks = nn.Sequential(*[Block(hidden) for _ in range(layers)]).cuda().to(BF16)
    xs = [torch.randn(1, seq, hidden, device="cuda", dtype=BF16, requires_grad=True)
          for _ in range(steps)]
    grads = torch.randn(1, seq, hidden, device="cuda", dtype=BF16)

    def run(sync):
        outs = []
        events = []
        # Forward steps, then backward steps (GPipe order): each one step of the pipeline.
        for x in xs:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            outs.append(blocks(x))
            e.record()
            events.append((s, e))
            if sync:
                torch.cuda.synchronize()
        for y in outs:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            y.backward(grads)
            e.record()
            events.append((s, e))
            if sync:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        return events

    for _ in range(2):  # warm-up: allocator, cuBLAS heuristics, clocks
        run(True)
        run(False)
    fwd_kernels, _ = count_gpu_ops(lambda: blocks(xs[0]))
    rows = {}
    for sync in (True, False):
        trials = []
        for _ in range(3):
            ev = run(sync)
            n = len(ev)
            half = n // 2
            gaps = [ev[i][1].elapsed_time(ev[i + 1][0]) for i in range(n - 1) if i + 1 != half]
            fwd = [a.elapsed_time(b) for a, b in ev[:half]]
            bwd = [a.elapsed_time(b) for a, b in ev[half:]]
            trials.append((statistics.median(gaps), statistics.median(fwd), statistics.median(bwd)))
        rows[sync] = [statistics.median(t[i] for t in trials) for i in range(3)]
    del blocks, xs
    torch.cuda.empty_cache()
    return fwd_kernels, rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    a = torch.randn(8192, 8192, device="cuda", dtype=BF16)
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        a @ a
    torch.cuda.synchronize()
    header = ["hidden", "seq", "layers", "fwd_kernels", "gap_us_sync", "fwd_ms_sync", "bwd_ms_sync",
              "gap_us_ahead", "fwd_ms_ahead", "bwd_ms_ahead"]
    path = os.path.join(out, "step-gap.csv")
    start = time.perf_counter()
    with open(path, "w", newline="") as f:
        f.write("# GPT blocks of modern_probe.py (bf16, head_dim 128, micro batch 1) as one pipeline "
                "stage; steps = 24 forwards then 24 backwards; _sync: torch.cuda.synchronize() after "
                "every step (Megatron's batch_p2p_sync), _ahead: none; gap = GPU idle between "
                "consecutive steps (CUDA events), medians over steps, median of 3 trials\n")
        w = csv.writer(f)
        w.writerow(header)
        for hidden, seq, layers in [(1024, 1024, 2), (1024, 2048, 4), (2048, 2048, 2),
                                    (2048, 2048, 4), (4096, 2048, 2), (4096, 2048, 4),
                                    (4096, 4096, 4), (8192, 2048, 2)]:
            if time.perf_counter() - start > 150:
                print("budget over, stopping", flush=True)
                break
            try:
                k, r = measure(hidden, seq, layers)
            except Exception as e:  # keep the rows measured so far
                print("failed", hidden, seq, layers, repr(e), flush=True)
                continue
            row = [hidden, seq, layers, k, round(r[True][0] * 1e3, 2), round(r[True][1], 4),
                   round(r[True][2], 4), round(r[False][0] * 1e3, 2), round(r[False][1], 4),
                   round(r[False][2], 4)]
            w.writerow(row)
            f.flush()
            print(row, flush=True)


if __name__ == "__main__":
    main()
