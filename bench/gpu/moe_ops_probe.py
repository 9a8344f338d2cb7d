#!/usr/bin/env python3
"""Times, on one NVIDIA GPU through PyTorch, the memory-bound operators of a mixture-of-experts
layer that pipetab prices from their bytes (src/model/moe.cpp): the router's score function and
top-k, the permutation of each token's hidden state to its k experts' rows (and the regrouping of
received rows by expert), the weighted unpermutation back, and the experts' SwiGLU, at the sizes
of Qwen3-30B-A3B, Qwen3-235B-A22B and DeepSeek-V3, for 2,048 to 16,384 tokens.

The kernels are PyTorch's own (index_select, index_add_, softmax, topk, silu): what an unfused
implementation runs; Megatron-Core's fused permute kernels move the same bytes in fewer launches.

Usage:  python3 bench/gpu/moe_ops_probe.py OUT_DIR      -> OUT_DIR/moe-ops.csv
Timing: CUDA events around a loop of `inner` calls after one warm-up, the median of 7 trials of
(loop time / inner); inputs random normal (BF16), routing uniform at random.
"""
import csv
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
DEV = "cuda"
BF16 = torch.bfloat16
MODELS = [("qwen3-30b-a3b", 2048, 128, 8, 768), ("qwen3-235b-a22b", 4096, 128, 8, 1536),
          ("deepseek-v3", 7168, 256, 8, 2048)]
TOKENS = [2048, 4096, 8192, 16384]
T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("PROBE_TOTAL_S", "240"))


def timed(fn, trial_ms=20.0):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    inner = max(1, min(200, int(trial_ms / once)))
    times = []
    for _ in range(7):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for name, h, experts, k, ffn in MODELS:
        for tokens in TOKENS:
            if time.perf_counter() - T0 > BUDGET_S:
                break
            x = torch.randn(tokens, h, device=DEV, dtype=BF16)
            logits = torch.randn(tokens, experts, device=DEV, dtype=BF16)
            chosen = torch.rand(tokens, experts, device=DEV).topk(k, dim=-1).indices
            order = torch.argsort(chosen.flatten(), stable=True)
            token_of_row = order // k
            probs = torch.rand(tokens * k, device=DEV, dtype=torch.float32)
            rows_in = torch.randn(tokens * k, h, device=DEV, dtype=BF16)
            fc1_out = torch.randn(tokens * k, 2 * ffn, device=DEV, dtype=BF16)
            perm = torch.randperm(tokens * k, device=DEV)

            def router():
                scores = torch.softmax(logits.float(), dim=-1)
                return torch.topk(scores, k, dim=-1)

            def permute():
                return x.index_select(0, token_of_row)

            def sort_chunks():
                return rows_in.index_select(0, perm)

            def unpermute():
                out = torch.zeros(tokens, h, device=DEV, dtype=BF16)
                return out.index_add_(0, token_of_row, rows_in * probs.to(BF16)[:, None])

            def swiglu():
                gate, up = fc1_out.chunk(2, dim=-1)
                return F.silu(gate) * up

            for op, fn in (("router.topk", router), ("moe.permute", permute),
                           ("moe.sort_chunks", sort_chunks), ("moe.unpermute", unpermute),
                           ("experts.activation", swiglu)):
                ms = timed(fn)
                rows.append({"model": name, "op": op, "tokens": tokens, "hidden": h,
                             "experts": experts, "top_k": k, "expert_ffn": ffn, "ms": f"{ms:.6g}"})
                print(f"[{time.perf_counter() - T0:6.1f}s] {name} T={tokens} {op}: {ms:.4f} ms",
                      flush=True)
            del x, logits, rows_in, fc1_out
            torch.cuda.empty_cache()
    with open(os.path.join(OUT, "moe-ops.csv"), "w", newline="") as f:
        f.write(f"# MoE memory-bound operators on {torch.cuda.get_device_name(0)}, torch "
                f"{torch.__version__}; PyTorch kernels (unfused), BF16, uniform random routing\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
