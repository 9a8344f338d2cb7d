#!/usr/bin/env python3
"""Measures, on one NVIDIA GPU through PyTorch, what pipetab's device model needs beyond the plain
BF16 GEMMs of device_probe.cu:

  1 concurrent   a BF16 GEMM's time alone and beside a memory-streaming copy kernel limited to
                 k CTAs on a second stream (as an NCCL kernel takes one CTA per channel);
  2 overhead     host/launch overhead of an eager PyTorch transformer step (forward + backward of
                 4 GPT blocks) against the same step replayed from a CUDA graph, kernels per step,
                 CPU enqueue time, and the time per back-to-back tiny launch;
  3 fp8          torch._scaled_mm FP8 (e4m3) GEMMs against torch.mm BF16 over a grid of shapes;
  4 grouped      MoE expert GEMMs through torch._grouped_mm (and _scaled_grouped_mm in FP8) against
                 a per-expert loop of torch.mm;
  5 attention    F.scaled_dot_product_attention (flash and cuDNN backends) at long sequences,
                 forward and forward+backward;
  6 overlap      a communication-like kernel of k CTAs, paced to a link's rate, beside one MoE
                 layer's forward + backward (and beside one GEMM, batched expert GEMM or attention
                 kernel already running): the compute's slowdown, the kernel's stretch and its
                 start delay (needs CuPy: the kernels read the GPU's global timer);
  7 combined     Megatron-Core's combined 1F1B step on one GPU: Qwen3-30B-A3B layer pairs, a forward
                 layer beside another microbatch's backward one, that copy kernel standing in for
                 each all-to-all, against the same nodes on one stream and the step with nothing
                 shared (bench/gpu/combined_1f1b.py): how much of the exchanges the GPU hides.

Usage:  python3 bench/gpu/modern_probe.py OUT_DIR     (or bench/gpu/run-modern-probe OUT_DIR)
Each section writes OUT_DIR/<topic>.csv as soon as it ends, has its own wall-clock budget and
stops early when over it; one failing section does not stop the others.
Environment: PROBE_SECTIONS (default "1,2,3,4,5,6,7"; run in that order), PROBE_TOTAL_S (default 510: no section
starts and no measurement is begun after this many seconds), PROBE_BUDGET_SCALE (default 1).

Timing: CUDA events; one warm-up call, then one timed call to size a loop of `inner` calls lasting
about `trial_ms`, then the median over `reps` (>= 5) trials of (loop time / inner). For GEMMs the
loop is preceded by a GPU sleep (torch.cuda._sleep) long enough for the host to enqueue the loop,
so the events time the GPU's work, not the host's launching. Inputs are random normal.
Not part of the CMake build: CI has no GPU. The committed results are under data/gpu/.
"""
import gc
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
T0 = time.perf_counter()
TOTAL_S = float(os.environ.get("PROBE_TOTAL_S", "510"))
SCALE = float(os.environ.get("PROBE_BUDGET_SCALE", "1"))
SECTIONS = [s.strip() for s in os.environ.get("PROBE_SECTIONS", "1,2,3,4,5,6,7").split(",") if s.strip()]
BUDGET_S = {"1": 60, "2": 60, "3": 90, "4": 90, "5": 130, "6": 60, "7": 40}
DEV = "cuda"
BF16 = torch.bfloat16
FP8 = getattr(torch, "float8_e4m3fn", None)
HAS_SLEEP = hasattr(torch.cuda, "_sleep")
CYCLES_PER_MS = 1.98e6  # recalibrated in main()
warnings.filterwarnings("ignore", category=DeprecationWarning)  # cupy.cuda.ExternalStream


def log(*a):
    print(f"[{time.perf_counter() - T0:7.1f}s]", *a, flush=True)


def fmt(v):
    if isinstance(v, str) and ("," in v or '"' in v):
        return '"' + v.replace('"', '""') + '"'
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def write_csv(name, header, rows, comments=()):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        for c in comments:
            f.write("# " + c + "\n")
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(fmt(r.get(h, "")) for h in header) + "\n")
    log(f"wrote {path} ({len(rows)} rows)")


def smi(fields="clocks.sm,clocks.mem,temperature.gpu,power.draw"):
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as ex:  # noqa: BLE001
        return f"nvidia-smi failed: {ex}"


class Budget:
    def __init__(self, name, seconds):
        self.name = name
        self.t0 = time.perf_counter()
        self.end = min(self.t0 + seconds * SCALE, T0 + TOTAL_S)
        self.skipped = 0

    def left(self):
        return self.end - time.perf_counter()

    def over(self, need_s=0.0):
        """True (and counts a skip) when less than need_s seconds are left."""
        if self.left() < need_s:
            self.skipped += 1
            return True
        return False


def free():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def bench(fn, reps=5, trial_ms=10.0, prefill=True, max_inner=400, stream=None):
    """Median milliseconds per call of fn (see the module docstring). Returns (ms, inner).
    fn must enqueue its work on `stream` (the current stream when None)."""
    st = stream if stream is not None else torch.cuda.current_stream()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    fn()  # warm-up: algorithm selection, workspace allocation, compilation
    st.synchronize()
    h0 = time.perf_counter()
    s.record(st)
    fn()
    e.record(st)
    host_s = time.perf_counter() - h0
    e.synchronize()
    one = s.elapsed_time(e)
    times = []
    if one >= trial_ms:  # long call: the sizing call is the first trial
        inner = 1
        times.append(one)
    else:
        inner = max(1, min(max_inner, int(trial_ms / max(one, 1e-4))))
    while len(times) < reps:
        if prefill and HAS_SLEEP:
            with torch.cuda.stream(st):
                torch.cuda._sleep(int(min(50.0, 1.5 * inner * host_s * 1e3 + 0.2) * CYCLES_PER_MS))
        s.record(st)
        for _ in range(inner):
            fn()
        e.record(st)
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return statistics.median(times), inner


def randn(*shape, dtype=BF16, **kw):
    return torch.randn(*shape, device=DEV, dtype=dtype, **kw)


# --------------------------------------------------------------------------------------------
# 1. GEMM beside a copy kernel restricted to k CTAs

COPY_SRC = r"""
extern "C" __global__ void copy_loop(float4* a, float4* b, long long n4, int iters) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (int it = 0; it < iters; ++it) {
    const float4* src = (it & 1) ? b : a;  // alternate direction so no pass is redundant
    float4* dst = (it & 1) ? a : b;
    long long i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {  // four 16-byte loads in flight per thread
      float4 x0 = src[i], x1 = src[i + stride], x2 = src[i + 2 * stride], x3 = src[i + 3 * stride];
      dst[i] = x0; dst[i + stride] = x1; dst[i + 2 * stride] = x2; dst[i + 3 * stride] = x3;
    }
    for (; i < n4; i += stride) dst[i] = src[i];
  }
}
"""

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _triton_copy(a_ptr, b_ptr, n, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        for _it in range(iters):
            for start in range(pid * BLOCK, n, nprog * BLOCK):
                offs = start + tl.arange(0, BLOCK)
                m = offs < n
                tl.store(b_ptr + offs, tl.load(a_ptr + offs, mask=m), mask=m)
except Exception:  # noqa: BLE001
    triton = None


class Copier:
    """A grid-stride copy over two buffers of `nbytes` each, with a chosen number of CTAs of
    512 threads. Each iteration reads nbytes and writes nbytes."""

    def __init__(self, nbytes):
        self.a = randn(nbytes // 4, dtype=torch.float32)
        self.b = torch.empty_like(self.a)
        self.n = self.a.numel()
        self.bytes_per_iter = 2 * nbytes
        try:
            import cupy as cp
            import numpy as np
            kern = cp.RawKernel(COPY_SRC, "copy_loop")
            ca, cb = cp.asarray(self.a), cp.asarray(self.b)
            streams = {}

            def launch(ctas, iters, stream):
                cs = streams.setdefault(stream.cuda_stream, cp.cuda.ExternalStream(stream.cuda_stream))
                with cs:
                    kern((ctas,), (512,), (ca, cb, np.int64(self.n // 4), np.int32(iters)))

            self.launch = launch
            self.impl = "cupy"
            self._check()
        except Exception as ex:  # noqa: BLE001
            log("cupy copy kernel unavailable:", repr(ex), "- trying triton")
            if triton is None:
                raise

            def launch(ctas, iters, stream):
                with torch.cuda.stream(stream):
                    _triton_copy[(ctas,)](self.a, self.b, self.n, iters, BLOCK=2048, num_warps=16)

            self.launch = launch
            self.impl = "triton"
            self._check()

    def _check(self):
        self.b.zero_()
        torch.cuda.synchronize()
        self.launch(8, 1, torch.cuda.Stream())
        torch.cuda.synchronize()
        if not (torch.equal(self.a[:4096], self.b[:4096]) and torch.equal(self.a[-4096:], self.b[-4096:])):
            raise RuntimeError(f"{self.impl} copy kernel copied wrongly")
        log(f"copy kernel: {self.impl}, buffers 2 x {self.n * 4 / 2**20:.0f} MiB")


def section_concurrent(b):
    rows = []
    cp = Copier(512 * 2**20)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    ks = [0, 4, 8, 16, 24, 32, 64]
    # copy alone, per CTA count
    alone = {}
    for k in ks[1:]:
        c0, c1 = ev(), ev()
        cp.launch(k, 1, s2)
        c0.record(s2)
        cp.launch(k, 1, s2)
        c1.record(s2)
        c1.synchronize()
        first = c0.elapsed_time(c1)
        iters = max(1, math.ceil(5.0 / first))
        ts = []
        for _ in range(3):
            c0.record(s2)
            cp.launch(k, iters, s2)
            c1.record(s2)
            c1.synchronize()
            ts.append(c0.elapsed_time(c1) / iters)
        ms = statistics.median(ts)
        alone[k] = (ms, cp.bytes_per_iter / (ms * 1e-3) / 1e9)
        log(f"copy alone k={k}: {alone[k][0]:.3f} ms/iter, {alone[k][1]:.0f} GB/s")
    c0, c1 = ev(), ev()
    c0.record(s2)
    cp.launch(132 * 4, 4, s2)
    c1.record(s2)
    c1.synchronize()
    full_gbps = 4 * cp.bytes_per_iter / (c0.elapsed_time(c1) * 1e-3) / 1e9
    log(f"copy alone with 528 CTAs (4 per SM): {full_gbps:.0f} GB/s")

    header = ["shape", "gemm_m", "gemm_n", "gemm_k", "k_ctas", "inner", "reps", "gemm_ms_alone",
              "gemm_ms_concurrent", "slowdown", "gemm_tflops_alone", "gemm_tflops_concurrent",
              "copy_gbps_alone", "copy_gbps_concurrent_est", "copy_iters", "copy_ms_total",
              "gemm_window_ms", "copy_covered_window", "copy_impl"]

    def save():
        write_csv("concurrent-gemm.csv", header, rows, comments=[
            f"BF16 torch.mm(A[m,k], W[n,k].t()) alone and beside a grid-stride copy kernel of k_ctas CTAs x 512 threads "
            f"({cp.impl}) on another stream over 2 x 512 MiB fp32 buffers; copy with 528 CTAs alone: {full_gbps:.0f} GB/s",
            "copy_gbps counts bytes read + written; copy_gbps_concurrent_est = (bytes moved - (copy time - GEMM window)"
            " x copy_gbps_alone) / GEMM window"])

    shapes = [("square8192", 8192, 8192, 8192),
              ("qkv_tp8_h12288", 4096, 4608, 12288),
              ("m4096_n1536_k12288", 4096, 1536, 12288),
              ("m4096_n6144_k1536", 4096, 6144, 1536),
              ("m2048_n4096_k4096", 2048, 4096, 4096)]
    reps, trial_ms = 7, 30.0
    for name, m, n, kk in shapes:
        if b.over(3.0):
            break
        x, w = randn(m, kk), randn(n, kk)
        fn = lambda: torch.mm(x, w.t())  # noqa: E731
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            ms_alone, inner = bench(fn, reps=reps, trial_ms=trial_ms, prefill=False, stream=s1)
        flops = 2.0 * m * n * kk
        log(f"{name}: alone {ms_alone:.3f} ms ({flops / ms_alone / 1e9:.0f} TFLOP/s), inner {inner}")
        window_est = reps * inner * ms_alone
        for k in ks:
            if b.over(2.0):
                break
            row = dict(shape=name, gemm_m=m, gemm_n=n, gemm_k=kk, k_ctas=k, inner=inner, reps=reps,
                       gemm_ms_alone=ms_alone, gemm_tflops_alone=flops / ms_alone / 1e9, copy_impl=cp.impl)
            if k == 0:
                row.update(gemm_ms_concurrent=ms_alone, slowdown=0.0,
                           gemm_tflops_concurrent=flops / ms_alone / 1e9)
                rows.append(row)
                continue
            copy_ms, copy_gbps = alone[k]
            # the copy must outlast the whole GEMM window, which the copy itself lengthens: size it for a
            # 2x slowdown, and if it still ends before the GEMMs do, run again with 3x as many iterations
            iters = math.ceil(2.0 * window_est / copy_ms) + 2
            for attempt in range(3):
                torch.cuda.synchronize()
                c0, c1 = ev(), ev()
                gs = [ev() for _ in range(reps)]
                ge = [ev() for _ in range(reps)]
                c0.record(s2)
                cp.launch(k, iters, s2)  # launched first, so its k CTAs hold their SMs from the start
                c1.record(s2)
                with torch.cuda.stream(s1):
                    for r in range(reps):
                        gs[r].record(s1)
                        for _ in range(inner):
                            fn()
                        ge[r].record(s1)
                torch.cuda.synchronize()
                if c0.elapsed_time(c1) >= c0.elapsed_time(gs[0]) + gs[0].elapsed_time(ge[-1]) or attempt == 2:
                    break
                log(f"  k={k}: copy of {iters} iterations ended before the GEMMs; again with 3x as many")
                iters *= 3
            conc = statistics.median(gs[r].elapsed_time(ge[r]) / inner for r in range(reps))
            window = gs[0].elapsed_time(ge[-1])
            lead = c0.elapsed_time(gs[0])
            dur = c0.elapsed_time(c1)
            covered = dur >= lead + window
            total_bytes = iters * cp.bytes_per_iter
            # bytes the copy moved while the GEMMs ran: all, less what it moved alone before and after
            est = (total_bytes - (dur - window) * 1e-3 * copy_gbps * 1e9) / (window * 1e-3) / 1e9 if covered else float("nan")
            row.update(gemm_ms_concurrent=conc, slowdown=conc / ms_alone - 1.0,
                       gemm_tflops_concurrent=flops / conc / 1e9, copy_gbps_alone=copy_gbps,
                       copy_gbps_concurrent_est=est, copy_iters=iters, copy_ms_total=dur,
                       gemm_window_ms=window, copy_covered_window=covered)
            rows.append(row)
            log(f"  k={k:3d}: {conc:.3f} ms, slowdown {100 * (conc / ms_alone - 1):5.1f}%, copy {copy_gbps:.0f} GB/s alone,"
                f" ~{est:.0f} GB/s beside the GEMM, covered {covered}")
        del x, w
        save()
    save()
    del cp
    return rows


# --------------------------------------------------------------------------------------------
# 2. host/launch overhead of eager PyTorch

class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.nh = h // 128
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.nh, 128).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def count_gpu_ops(step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = memops = 0
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            if e.name.lower().startswith(("memset", "memcpy")):
                memops += 1
            else:
                kernels += 1
    return kernels, memops


def wall_ms(fn, reps=7, sync_after=True):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if sync_after:
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(ts)


def section_overhead(b):
    rows = []
    header = ["kind", "hidden", "seq", "layers", "kernels", "memops", "eager_ms", "eager_pipelined_ms",
              "graph_ms", "overhead_ms", "overhead_per_kernel_us", "cpu_enqueue_ms",
              "cpu_enqueue_per_kernel_us", "step_tflop", "graph_tflops", "metric", "value"]
    comments = ["GPT block (LayerNorm, QKV Linear, causal SDPA, out Linear, residual, LayerNorm, MLP h-4h-h GeLU),"
                " head_dim 128, bf16, micro batch 1, forward + backward of `layers` blocks; eager_ms and graph_ms:"
                " wall time of one step between synchronizes (median of 7); eager_pipelined_ms: 5 steps back to back / 5;"
                " cpu_enqueue_ms: host time to issue one step without synchronizing; kernels from torch.profiler"]

    # tiny launches
    try:
        x = torch.zeros(1, device=DEV)
        for _ in range(100):
            x.add_(1.0)
        torch.cuda.synchronize()
        n = 10000
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        res = []
        for _ in range(5):
            torch.cuda.synchronize()
            t = time.perf_counter()
            s.record()
            for _ in range(n):
                x.add_(1.0)
            e.record()
            torch.cuda.synchronize()
            res.append(((time.perf_counter() - t) * 1e6 / n, s.elapsed_time(e) * 1e3 / n))
        rows.append(dict(kind="launch", metric="eager_tiny_add_wall_us_per_launch", value=statistics.median(r[0] for r in res)))
        rows.append(dict(kind="launch", metric="eager_tiny_add_gpu_event_us_per_launch", value=statistics.median(r[1] for r in res)))
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):
            for _ in range(1000):
                x.add_(1.0)
        g.replay()
        torch.cuda.synchronize()
        gt = []
        for _ in range(5):
            s.record()
            g.replay()
            e.record()
            e.synchronize()
            gt.append(s.elapsed_time(e) * 1e3 / 1000)
        rows.append(dict(kind="launch", metric="graph_tiny_add_gpu_us_per_kernel", value=statistics.median(gt)))
        del g
        for r in rows:
            log(f"launch: {r['metric']} = {r['value']:.2f}")
    except Exception:  # noqa: BLE001
        log(f"launch timing failed:\n{traceback.format_exc()}")
    write_csv("host-overhead.csv", header, rows, comments)

    L = 4
    for h in (1024, 2048, 4096):
        for sq in (1024, 2048, 4096):
            if b.over(4.0):
                break
            try:
                model = nn.Sequential(*[Block(h) for _ in range(L)]).to(device=DEV, dtype=BF16)
                params = list(model.parameters())
                xin = randn(1, sq, h)
                dy = randn(1, sq, h)

                def clear():
                    for p in params:
                        p.grad = None

                def fwdbwd():
                    model(xin).backward(dy)

                def step():
                    clear()
                    fwdbwd()

                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                eager = wall_ms(step)
                enqueue = wall_ms(step, sync_after=False)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                pipelined = (time.perf_counter() - t) * 1e3 / 5
                try:
                    kernels, memops = count_gpu_ops(step)
                except Exception as ex:  # noqa: BLE001
                    log(f"profiler failed: {repr(ex)[:300]}")
                    kernels, memops = 0, 0
                graph = None
                try:
                    clear()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        fwdbwd()
                    graph.replay()
                    graph.replay()
                    torch.cuda.synchronize()
                    gms = wall_ms(graph.replay)
                except Exception as ex:  # noqa: BLE001
                    log(f"graph capture failed: {repr(ex)[:300]}")
                    gms = float("nan")
                flop = L * (72.0 * sq * h * h + 7.0 * sq * sq * h)
                row = dict(kind="block", hidden=h, seq=sq, layers=L, kernels=kernels, memops=memops,
                           eager_ms=eager, eager_pipelined_ms=pipelined, graph_ms=gms,
                           overhead_ms=eager - gms,
                           overhead_per_kernel_us=(eager - gms) * 1e3 / kernels if kernels else float("nan"),
                           cpu_enqueue_ms=enqueue, cpu_enqueue_per_kernel_us=enqueue * 1e3 / kernels if kernels else float("nan"),
                           step_tflop=flop / 1e12, graph_tflops=flop / gms / 1e9)
                rows.append(row)
                log(f"block h={h} s={sq}: {kernels} kernels (+{memops} memops), eager {eager:.2f} ms, pipelined {pipelined:.2f},"
                    f" graph {gms:.2f} ms, enqueue {enqueue:.2f} ms")
                del graph, model, params, xin, dy
            except Exception:  # noqa: BLE001
                log(f"block h={h} s={sq} failed:\n{traceback.format_exc()}")
            free()
            write_csv("host-overhead.csv", header, rows, comments)
    return rows


# --------------------------------------------------------------------------------------------
# 3. FP8 GEMMs

def section_fp8(b):
    rows = []
    header = ["m", "n", "k", "dtype", "scaling", "ms", "tflops", "inner"]
    sizes = [512, 1024, 2048, 4096, 8192, 16384]
    one = torch.ones((), device=DEV, dtype=torch.float32)
    # correctness check on one small shape
    a = randn(256, 512).to(FP8)
    w = randn(384, 512).to(FP8)
    out = torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=BF16)
    ref = torch.mm(a.to(BF16), w.to(BF16).t())
    log(f"fp8 _scaled_mm check: max rel err {((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item():.3e}")
    rowwise_ok = True
    try:
        out = torch._scaled_mm(a, w.t(), scale_a=torch.ones(256, 1, device=DEV), scale_b=torch.ones(1, 384, device=DEV),
                               out_dtype=BF16)
        log(f"fp8 rowwise check: max rel err {((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item():.3e}")
    except Exception as ex:  # noqa: BLE001
        rowwise_ok = False
        log("rowwise _scaled_mm unsupported:", repr(ex)[:300])
    subset = {(s, s, s) for s in sizes}
    subset |= {(4096, n, k) for n in (1024, 4096, 16384) for k in (1024, 4096, 16384)}
    subset |= {(16384, 4096, 4096), (8192, 1024, 8192), (2048, 16384, 2048), (512, 8192, 8192), (1024, 16384, 16384)}
    for m in sizes:
        for n in sizes:
            for k in sizes:
                flops = 2.0 * m * n * k
                if flops > 4e13:
                    continue
                if b.over(1.0):
                    break
                x, w = randn(m, k), randn(n, k)
                x8, w8 = x.to(FP8), w.to(FP8)
                variants = [("bf16", "none", lambda: torch.mm(x, w.t())),
                            ("fp8_e4m3", "tensorwise",
                             lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=BF16))]
                if (m, n, k) in subset:
                    variants.append(("fp8_e4m3", "tensorwise_fastaccum",
                                     lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=BF16,
                                                              use_fast_accum=True)))
                    if rowwise_ok:
                        sa = torch.ones(m, 1, device=DEV, dtype=torch.float32)
                        sb = torch.ones(1, n, device=DEV, dtype=torch.float32)
                        variants.append(("fp8_e4m3", "rowwise",
                                         lambda: torch._scaled_mm(x8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=BF16)))
                for dt, sc, fn in variants:
                    try:
                        ms, inner = bench(fn, trial_ms=8.0)
                        rows.append(dict(m=m, n=n, k=k, dtype=dt, scaling=sc, ms=ms, tflops=flops / ms / 1e9, inner=inner))
                    except Exception as ex:  # noqa: BLE001
                        log(f"fp8 {m}x{n}x{k} {dt} {sc} failed: {repr(ex)[:200]}")
                del x, w, x8, w8
            if len(rows) and rows[-1]["m"] == m and rows[-1]["n"] == n:
                r = [q for q in rows if q["m"] == m and q["n"] == n and q["k"] == max(sizes)]
                if r:
                    log(f"fp8 m={m} n={n}: " + ", ".join(f"{q['dtype']}/{q['scaling']} {q['tflops']:.0f}" for q in r))
        write_csv("fp8-gemm.csv", header, rows, comments=[
            "D[m,n] = A[m,k] x W[n,k]^T; bf16: torch.mm; fp8: torch._scaled_mm(A8, W8.t(), scales, out_dtype=bf16), "
            "float32 scales (tensorwise: scalar; rowwise: (m,1) and (1,n)); GPU time with the queue prefilled"])
    free()
    return rows


# --------------------------------------------------------------------------------------------
# 4. grouped (MoE expert) GEMMs

def section_grouped(b):
    rows = []
    header = ["impl", "dtype", "proj", "E", "rows_per_expert", "tokens", "k", "n", "ms", "tflops", "ms_no_prefill", "inner"]
    gmm = getattr(torch, "_grouped_mm", None)
    gmm_name = "torch._grouped_mm"
    if gmm is None and hasattr(F, "grouped_mm"):
        gmm, gmm_name = F.grouped_mm, "F.grouped_mm"
    sgmm = getattr(torch, "_scaled_grouped_mm", None)
    layout = None
    if gmm is not None:
        try:
            log(f"{gmm_name} doc: {(gmm.__doc__ or '').strip()[:300]!r}")
        except Exception:  # noqa: BLE001
            pass
        E, rows_, kk, nn_ = 4, 64, 256, 512
        x = randn(E * rows_, kk)
        w = randn(E, nn_, kk)
        offs = torch.arange(1, E + 1, device=DEV, dtype=torch.int32) * rows_
        ref = torch.cat([x[e * rows_:(e + 1) * rows_] @ w[e].t() for e in range(E)])
        for name, bmat in (("b=W[E][N][K].transpose", lambda w: w.transpose(-2, -1)),
                           ("b=W[E][K][N] contiguous", lambda w: w.transpose(-2, -1).contiguous())):
            try:
                out = gmm(x, bmat(w), offs=offs)
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                log(f"{gmm_name} with {name}: rel err {err:.2e}")
                if err < 2e-2:
                    layout = (name, bmat)
                    break
            except Exception as ex:  # noqa: BLE001
                log(f"{gmm_name} with {name} failed: {repr(ex)[:300]}")
        fp8_ok = False
        if sgmm is not None and FP8 is not None:
            try:
                x8, w8 = x.to(FP8), w.to(FP8)
                ref8 = torch.cat([x8[e * rows_:(e + 1) * rows_].to(BF16) @ w8[e].to(BF16).t() for e in range(E)])
                out = sgmm(x8, w8.transpose(-2, -1), torch.ones(E * rows_, device=DEV), torch.ones(E, nn_, device=DEV),
                           offs=offs, out_dtype=BF16)
                err = ((out.float() - ref8.float()).abs().max() / ref8.float().abs().max()).item()
                log(f"_scaled_grouped_mm rowwise: rel err {err:.2e}")
                fp8_ok = err < 2e-2
            except Exception as ex:  # noqa: BLE001
                log(f"_scaled_grouped_mm failed: {repr(ex)[:300]}")
    else:
        fp8_ok = False
    impl = f"{gmm_name}[{layout[0]}]" if layout else None
    if impl is None:
        log("no grouped GEMM: only the per-expert torch.mm loop is timed")

    def loop_fn(x, w, out, E, rows_):
        xs = [x[e * rows_:(e + 1) * rows_] for e in range(E)]
        os_ = [out[e * rows_:(e + 1) * rows_] for e in range(E)]
        ws = [w[e].t() for e in range(E)]

        def f():
            for e in range(E):
                torch.mm(xs[e], ws[e], out=os_[e])
        return f

    Es = (8, 16, 32, 64, 128)
    rpes = (32, 64, 128, 256, 512, 1024, 2048, 4096)
    dims = ((2048, 768), (4096, 1536), (7168, 2048), (4096, 14336))
    for h, ffn in dims:
        for proj, kk, nn_ in (("up", h, ffn), ("down", ffn, h)):
            for E in Es:
                if b.over(2.0):
                    break
                wbytes = 2.0 * E * kk * nn_
                if wbytes > 20e9:
                    continue
                w = randn(E, nn_, kk)
                w8 = w.to(FP8) if (fp8_ok and (h, ffn) == (7168, 2048)) else None
                bm = layout[1](w) if impl else None
                for rpe in rpes:
                    T = E * rpe
                    flops = 2.0 * T * kk * nn_
                    mem = wbytes + 2.0 * T * (kk + nn_)
                    if flops > 2e13 or mem > 20e9:
                        continue
                    if b.over(max(1.0, 10 * flops / 5e14)):
                        break
                    x = randn(T, kk)
                    offs = torch.arange(1, E + 1, device=DEV, dtype=torch.int32) * rpe
                    base = dict(proj=proj, E=E, rows_per_expert=rpe, tokens=T, k=kk, n=nn_)
                    compare = (h, ffn) == (4096, 1536) and E in (8, 64)
                    try:
                        if impl:
                            fn = lambda: gmm(x, bm, offs=offs)  # noqa: E731
                            ms, inner = bench(fn)
                            r = dict(base, impl=impl, dtype="bf16", ms=ms, tflops=flops / ms / 1e9, inner=inner)
                            if compare:
                                r["ms_no_prefill"] = bench(fn, prefill=False)[0]
                            rows.append(r)
                        if w8 is not None:
                            x8 = x.to(FP8)
                            sa = torch.ones(T, device=DEV)
                            sb = torch.ones(E, nn_, device=DEV)
                            w8t = w8.transpose(-2, -1)
                            fn = lambda: sgmm(x8, w8t, sa, sb, offs=offs, out_dtype=BF16)  # noqa: E731
                            ms, inner = bench(fn)
                            rows.append(dict(base, impl="torch._scaled_grouped_mm[rowwise]", dtype="fp8_e4m3", ms=ms,
                                             tflops=flops / ms / 1e9, inner=inner))
                            del x8, sa, sb
                        if compare or impl is None:
                            out = torch.empty(T, nn_, device=DEV, dtype=BF16)
                            fn = loop_fn(x, w, out, E, rpe)
                            ms, inner = bench(fn, max_inner=100)
                            ms_np = bench(fn, prefill=False, max_inner=100)[0]
                            rows.append(dict(base, impl="torch.mm loop", dtype="bf16", ms=ms, tflops=flops / ms / 1e9,
                                             ms_no_prefill=ms_np, inner=inner))
                            del out
                    except Exception as ex:  # noqa: BLE001
                        log(f"grouped {proj} E={E} rows={rpe} k={kk} n={nn_} failed: {repr(ex)[:300]}")
                    del x
                got = [r for r in rows if r["E"] == E and r["k"] == kk and r["n"] == nn_]
                if got:
                    log(f"grouped h={h} ffn={ffn} {proj} E={E}: " +
                        " ".join(f"{r['rows_per_expert']}:{r['tflops']:.0f}" for r in got if r["dtype"] == "bf16" and r["impl"] != "torch.mm loop"))
                del w, w8, bm
                free()
            write_csv("grouped-gemm.csv", header, rows, comments=[
                "MoE expert GEMMs: tokens = E x rows_per_expert rows, each group X_e[rows,k] x W_e[n,k]^T; up: k=hidden n=expert_ffn;"
                " down: k=expert_ffn n=hidden; GPU time with the queue prefilled (ms) and, for the comparison subset, without"
                " (ms_no_prefill: host launches included); fp8 rowwise scales of ones"])
    return rows


# --------------------------------------------------------------------------------------------
# 5. attention at long sequences

def section_attention(b):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    header = ["backend", "causal", "heads", "kv_heads", "head_dim", "seq", "batch", "fwd_ms", "fwdbwd_ms",
              "fwd_tflops", "bwd_tflops", "fwdbwd_tflops"]
    backends = {"flash": SDPBackend.FLASH_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
    failed = set()
    speed = {}  # backend -> (fwd TFLOP/s, fwd+bwd TFLOP/s) seen last
    d = 128

    def run(bk, causal, heads, kvh, seq):
        if (bk, kvh != heads) in failed:
            return
        tokens = max(seq, 32768)
        batch = tokens // seq
        fwd_flops = 4.0 * batch * heads * seq * seq * d * (0.5 if causal else 1.0)
        tf, tfb = speed.get(bk, (350.0, 300.0))
        need = 6 * (fwd_flops / (tf * 1e12) + 3.5 * fwd_flops / (tfb * 1e12)) + 1.0
        if b.over(need):
            log(f"attention {bk} causal={causal} h={heads}/{kvh} s={seq}: skipped, needs ~{need:.0f} s, {b.left():.0f} s left")
            return
        q = randn(batch, heads, seq, d, requires_grad=True)
        k = randn(batch, kvh, seq, d, requires_grad=True)
        v = randn(batch, kvh, seq, d, requires_grad=True)
        do = randn(batch, heads, seq, d)
        kw = dict(is_causal=causal)
        if kvh != heads:
            kw["enable_gqa"] = True

        def fwd():
            with sdpa_kernel(backends[bk]):
                return F.scaled_dot_product_attention(q, k, v, **kw)

        def fwdbwd():
            with sdpa_kernel(backends[bk]):
                o = F.scaled_dot_product_attention(q, k, v, **kw)
            torch.autograd.grad(o, (q, k, v), do)
        try:
            f_ms, _ = bench(fwd, trial_ms=20.0, prefill=False)
            fb_ms, _ = bench(fwdbwd, trial_ms=20.0, prefill=False)
        except Exception as ex:  # noqa: BLE001
            log(f"attention {bk} causal={causal} h={heads}/{kvh} s={seq} failed: {repr(ex)[:300]}")
            failed.add((bk, kvh != heads))
            return
        finally:
            del q, k, v, do
        bwd_ms = fb_ms - f_ms
        r = dict(backend=bk, causal=causal, heads=heads, kv_heads=kvh, head_dim=d, seq=seq, batch=batch,
                 fwd_ms=f_ms, fwdbwd_ms=fb_ms, fwd_tflops=fwd_flops / f_ms / 1e9,
                 bwd_tflops=2.5 * fwd_flops / bwd_ms / 1e9 if bwd_ms > 0 else float("nan"),
                 fwdbwd_tflops=3.5 * fwd_flops / fb_ms / 1e9)
        rows.append(r)
        save()
        speed[bk] = (r["fwd_tflops"], r["fwdbwd_tflops"])
        log(f"attention {bk} causal={causal} h={heads}/{kvh} s={seq} b={batch}: fwd {f_ms:.2f} ms {r['fwd_tflops']:.0f} TF,"
            f" bwd {r['bwd_tflops']:.0f} TF")

    def save():
        write_csv("attention.csv", header, rows, comments=[
            "F.scaled_dot_product_attention, bf16, q/k/v (batch, heads, seq, head_dim), batch*seq = max(seq, 32768);"
            " forward FLOPs 4*b*h*s^2*d (halved when causal), backward 2.5x forward; bwd_ms = fwdbwd_ms - fwd_ms"])

    seqs = (2048, 4096, 8192, 16384, 32768, 65536)
    for bk in backends:
        for seq in seqs:
            for causal in (True, False):
                run(bk, causal, 32, 32, seq)
        save()
    for bk in backends:
        for causal in (True, False):
            run(bk, causal, 32, 32, 131072)
        save()
    for seq in (8192, 32768, 131072):
        for causal in (True, False):
            run("flash", causal, 32, 8, seq)
    save()
    for seq in (8192, 32768):
        for causal in (True, False):
            run("flash", causal, 64, 64, seq)
    save()
    free()
    return rows


# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# 6. A communication kernel beside one MoE layer's compute

# What the combined 1F1B model (docs/simulation.md, "DeepEP beside compute") takes from the
# device, measured without a network: a kernel that holds k CTAs and moves its bytes no faster
# than a link's rate (DeepEP's normal kernels hold 20 or 24 SMs, HybridEP's 16; reference M2),
# beside the kernels of one MoE layer's forward and backward on another stream. It gives the
# compute's slowdown while the kernel runs (DeviceSpec::comm_slowdown), the kernel's own stretch
# beside compute (overlapped_deepep_efficiency's SM and memory share; the network's part, peers
# waiting for each other, is not on one GPU), and how long a kernel issued while a GEMM or the
# attention runs waits before its first CTA starts.
PACED_SRC = r"""
extern "C" __global__ void stamp(unsigned long long* out) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out[0] = t;
}

// Copies `chunks` chunks of `chunk4` float4s from src to dst, chunk c no earlier than
// ns_per_chunk * c after the kernel's first CTA began (a transfer paced by its link); the CTAs
// take the chunks in turn, and one that starts late catches up. clock[0]: the first CTA's start;
// clock[1 + 2b] and clock[2 + 2b]: CTA b's start and end (globaltimer, ns).
extern "C" __global__ void paced_copy(const float4* __restrict__ src, float4* __restrict__ dst,
                                      long long chunks, long long chunk4, double ns_per_chunk,
                                      unsigned long long* clock) {
  __shared__ unsigned long long origin;
  unsigned long long now;
  if (threadIdx.x == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    clock[1 + 2 * blockIdx.x] = now;
    const unsigned long long old = atomicCAS(&clock[0], 0ull, now);
    origin = old == 0ull ? now : old;
  }
  __syncthreads();
  for (long long c = blockIdx.x; c < chunks; c += gridDim.x) {
    if (threadIdx.x == 0) {
      const unsigned long long due = origin + (unsigned long long)(ns_per_chunk * (double)c);
      do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      } while (now < due);
    }
    __syncthreads();
    const long long base = c * chunk4;
    for (long long i = threadIdx.x; i < chunk4; i += blockDim.x) dst[base + i] = src[base + i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    clock[2 + 2 * blockIdx.x] = now;
  }
}
"""
PACED_CHUNK = 64 * 1024  # bytes a CTA moves per step


class Paced:
    """The paced copy over two buffers of `nbytes`, launched through CuPy on a torch stream, and a
    one-thread kernel that writes the GPU's global timer (ns) into a slot of `marks`."""

    def __init__(self, nbytes, max_ctas=64, slots=16):
        import cupy as cp
        import numpy as np
        self.np = np
        mod = cp.RawModule(code=PACED_SRC)
        self.k_paced, self.k_stamp = mod.get_function("paced_copy"), mod.get_function("stamp")
        self.src = randn(nbytes // 4, dtype=torch.float32)
        self.dst = torch.empty_like(self.src)
        self.nbytes = nbytes
        self.max_ctas = max_ctas
        self.clock = torch.zeros(1 + 2 * max_ctas, device=DEV, dtype=torch.int64)
        self.marks = torch.zeros(slots, device=DEV, dtype=torch.int64)
        self.cp = cp
        self.c_src, self.c_dst = cp.asarray(self.src), cp.asarray(self.dst)
        self.c_clock, self.c_marks = cp.asarray(self.clock), cp.asarray(self.marks)
        self.streams = {}

    def _on(self, stream):
        return self.streams.setdefault(stream.cuda_stream, self.cp.cuda.ExternalStream(stream.cuda_stream))

    def stamp(self, slot, stream):
        with self._on(stream):
            self.k_stamp((1,), (1,), (self.c_marks[slot:slot + 1],))

    def launch(self, ctas, gbps, stream):
        """Enqueues the copy on `stream`: all `nbytes` at `gbps` GB/s at most, over `ctas` CTAs."""
        assert ctas <= self.max_ctas
        np = self.np
        chunks = self.nbytes // PACED_CHUNK
        with torch.cuda.stream(stream):
            self.clock.zero_()
        with self._on(stream):
            self.k_paced((ctas,), (512,), (self.c_src, self.c_dst, np.int64(chunks), np.int64(PACED_CHUNK // 16),
                                           np.float64(PACED_CHUNK / gbps), self.c_clock))

    def span(self, ctas):
        """(first CTA's start, last CTA's end) of the last launch, in ns of the global timer."""
        c = self.clock.cpu().tolist()
        return min(c[1:1 + 2 * ctas:2]), max(c[2:2 + 2 * ctas:2])


# Qwen3-30B-A3B at EP 16 and micro batch 1: hidden, query and key-value heads, head size, local
# experts, expert width, tokens (and rows per local expert under balanced routing: 4,096 x top-8 x
# 16 ranks / 128 experts), experts, top-k.
MOE_LAYER_SHAPE = dict(h=2048, heads=32, kvh=4, hd=128, local=8, ffn=768, t=4096, experts=128, topk=8)


def moe_layer_pieces():
    """The pieces of one MOE_LAYER_SHAPE layer as Megatron-Core's schedule plan splits it, each a
    node with its input detached (ScheduleNode): attention (norm, QKV, causal attention,
    projection, residual) and the router's GEMM, softmax and top-k; then the local experts' SwiGLU
    over `t` rows each in batched GEMMs, the rows copied in (the permutation) and summed back.
    Returns (f_attn, f_mlp, tokens, hidden, parameters)."""
    c = MOE_LAYER_SHAPE
    h, heads, kvh, hd, local, ffn, t, experts, topk = (c[k] for k in (
        "h", "heads", "kvh", "hd", "local", "ffn", "t", "experts", "topk"))

    def param(*shape):
        return (randn(*shape) * 0.02).requires_grad_()

    wqkv, wo, wr = param((heads + 2 * kvh) * hd, h), param(h, heads * hd), param(experts, h)
    w1, w2 = param(local, h, 2 * ffn), param(local, ffn, h)

    def norm(x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (h,))
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def f_attn(x):
        x = x.detach().requires_grad_()
        q, k, v = (norm(x) @ wqkv.t()).split([heads * hd, kvh * hd, kvh * hd], dim=-1)
        q = q.view(t, heads, hd).transpose(0, 1).unsqueeze(0)
        k = k.view(t, kvh, hd).transpose(0, 1).repeat_interleave(heads // kvh, 0).unsqueeze(0)
        v = v.view(t, kvh, hd).transpose(0, 1).repeat_interleave(heads // kvh, 0).unsqueeze(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = x + a.squeeze(0).transpose(0, 1).reshape(t, heads * hd) @ wo.t()
        torch.topk(torch.softmax((norm(y) @ wr.t()).float(), dim=-1), topk, dim=-1)
        return x, y

    def f_mlp(y):
        y = y.detach().requires_grad_()
        gate, up = torch.bmm(norm(y).unsqueeze(0).repeat(local, 1, 1), w1).chunk(2, dim=-1)
        return y, y + torch.bmm(F.silu(gate) * up, w2).sum(0)

    return f_attn, f_mlp, t, h, [wqkv, wo, wr, w1, w2]


def moe_layer_step():
    """Forward and backward of one MOE_LAYER_SHAPE layer (moe_layer_pieces: attention and router,
    then the experts) as one rank of EP 16 runs it at micro batch 1, the rows copied in and summed
    back in place of the dispatch and combine. Returns the step."""
    f_attn, f_mlp, t, h, params = moe_layer_pieces()
    x0, dy = randn(t, h), randn(t, h)

    def step():
        for p in params:
            p.grad = None
        attn = f_attn(x0)
        mlp = f_mlp(attn[1])
        torch.autograd.backward(mlp[1], dy)
        torch.autograd.backward(attn[1], mlp[0].grad)

    return step


def section_overlap(b):
    rows = []
    header = ["case", "compute", "k_ctas", "mbytes", "rate_gbps", "reps", "compute_ms_alone",
              "compute_ms_beside", "overlap_ms", "compute_slowdown_while_beside", "comm_ms_alone",
              "comm_ms_beside", "comm_stretch", "comm_issue_ms", "comm_start_delay_ms", "compute_end_ms"]
    comments = [
        "comm: a copy kernel of k_ctas CTAs x 512 threads moving mbytes MiB (read and written once) no faster than"
        " rate_gbps (paced by the global timer), on a second stream; compute: one Qwen3-30B-A3B layer's forward +"
        " backward at EP 16 and micro batch 1 (layer), or one kernel (gemm8192: torch.mm 8192^3 BF16; experts: torch.bmm"
        " of 8 experts x 4096 rows, 2048 -> 1536; attention: causal SDPA, 32 heads of 128, 4096 tokens)",
        "times from the GPU's global timer, medians over reps; both streams are filled behind a GPU sleep before either"
        " starts. case beside: the comm issued as the compute starts; case issued_during: issued after a GPU sleep of"
        " comm_issue_ms on its stream (cycles at the clock calibrated at the start: approximate under load)",
        "compute_slowdown_while_beside s: the compute runs 1 + s times longer while the comm runs (extra = s / (1 + s)"
        " x overlap_ms), as pipetab's comm_slowdown; comm_stretch: comm_ms_beside / comm_ms_alone, whose inverse"
        " overlapped_deepep_efficiency takes (less the network's part)"]
    pc = Paced(128 * 2**20)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    started = torch.cuda.Event()
    layer = moe_layer_step()
    x8, w8 = randn(8192, 8192), randn(8192, 8192)
    xe, we = randn(8, 4096, 2048), randn(8, 2048, 1536)
    qa = randn(1, 32, 4096, 128)
    computes = {"layer": layer, "gemm8192": lambda: torch.mm(x8, w8),
                "experts": lambda: torch.bmm(xe, we),
                "attention": lambda: F.scaled_dot_product_attention(qa, qa, qa, is_causal=True)}
    ns = 1e6  # ns per ms

    def run(compute, ctas=0, gbps=0.0, issue_ms=None):
        """One measurement: (compute ms, comm ms, comm's first start after the compute's, compute
        end after its start), all from the global timer; the comm is skipped at ctas 0, issued with
        the compute at issue_ms None, else issue_ms after the compute starts."""
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            if HAS_SLEEP:
                torch.cuda._sleep(int(20 * CYCLES_PER_MS))  # the host enqueues both streams meanwhile
            pc.stamp(0, s1)
            started.record(s1)
            if compute is not None:
                computes[compute]()
            pc.stamp(1, s1)
        if ctas:
            s2.wait_event(started)
            if issue_ms and HAS_SLEEP:
                with torch.cuda.stream(s2):
                    torch.cuda._sleep(int(issue_ms * CYCLES_PER_MS))
            pc.launch(ctas, gbps, s2)
        torch.cuda.synchronize()
        m = pc.marks.cpu().tolist()
        comp = (m[1] - m[0]) / ns
        if not ctas:
            return comp, float("nan"), float("nan")
        first, last = pc.span(ctas)
        return comp, (last - first) / ns, (first - m[0]) / ns

    def median_of(reps, *args):
        got = [run(*args) for _ in range(reps)]
        return [statistics.median(g[i] for g in got) for i in range(3)]

    for name in computes:  # warm-up: algorithm choice, workspaces, the allocator
        computes[name]()
    torch.cuda.synchronize()
    reps = 5
    alone = {name: median_of(reps, name)[0] for name in computes}
    for name, ms in alone.items():
        log(f"{name} alone: {ms:.3f} ms")
    comm_alone = {}
    for ctas in (16, 20, 24):
        for gbps in (50.0, 200.0):
            comm_alone[ctas, gbps] = median_of(reps, None, ctas, gbps)[1]
            log(f"comm k={ctas} at {gbps:.0f} GB/s alone: {comm_alone[ctas, gbps]:.3f} ms")

    def add(case, compute, ctas, gbps, issue_ms, got):
        comp, comm, start = got
        overlap = max(0.0, min(comp, start + comm) - max(0.0, start))
        extra = comp - alone[compute]
        rows.append(dict(case=case, compute=compute, k_ctas=ctas, mbytes=pc.nbytes / 2**20, rate_gbps=gbps,
                         reps=reps, compute_ms_alone=alone[compute], compute_ms_beside=comp, overlap_ms=overlap,
                         compute_slowdown_while_beside=extra / (overlap - extra) if overlap > extra else float("nan"),
                         comm_ms_alone=comm_alone[ctas, gbps], comm_ms_beside=comm,
                         comm_stretch=comm / comm_alone[ctas, gbps], comm_issue_ms=issue_ms or 0.0,
                         comm_start_delay_ms=start - (issue_ms or 0.0), compute_end_ms=comp))
        r = rows[-1]
        log(f"{case} {compute} k={ctas} {gbps:.0f} GB/s: compute {comp:.3f} ms (alone {alone[compute]:.3f}),"
            f" comm {comm:.3f} ms (alone {r['comm_ms_alone']:.3f}), start delay {r['comm_start_delay_ms']:.3f} ms")

    for ctas in (16, 20, 24):
        for gbps in (50.0, 200.0):
            if b.over(3.0):
                break
            add("beside", "layer", ctas, gbps, None, median_of(reps, "layer", ctas, gbps))
        write_csv("overlap.csv", header, rows, comments)
    for name in ("gemm8192", "experts", "attention"):
        for ctas in (16, 24):
            if b.over(2.0):
                break
            issue = 0.25 * alone[name]
            add("issued_during", name, ctas, 200.0, issue, median_of(reps, name, ctas, 200.0, issue))
        write_csv("overlap.csv", header, rows, comments)
    del pc, x8, w8, xe, we, qa
    return rows


# --------------------------------------------------------------------------------------------
# 7. Megatron-Core's combined 1F1B step on one GPU
#
# The step the combined 1F1B model stands on (docs/simulation.md, "The combined 1F1B";
# bench/gpu/combined_1f1b.py) run on one GPU: Qwen3-30B-A3B layer pairs at EP 16 and micro batch 1,
# one microbatch's forward layer beside another's backward layer, their pieces on a compute
# stream and the paced copy kernel standing in for each all-to-all on a communication stream, in
# Megatron-Core's order and with its one event per microbatch. The copy takes the exchange's SMs
# and moves 128 MiB (134.2 MB, the preset's dispatch of one such layer) at 200 GB/s, about the
# 0.67 ms the dgx-h100 preset gives it; no network, no peers. The same nodes on one stream
# (serial) and without the exchanges (compute_only) time the pieces alone; combined_1f1b.span of
# those times is the step with nothing shared, what the simulation assumes before its slowdowns.
# Q1's Nsight profiles hide 36.6% of the communication where the model hides 93.3%
# (results/accuracy-moe.md): this tells how much of that the GPU's own sharing explains.


def section_combined(b):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import combined_1f1b as c1
    pieces = c1.PIECES  # in the order each layer pair runs them
    header = ["mode", "k_ctas", "rate_gbps", "layers", "reps", "span_ms", "ideal_ms", "span_over_ideal",
              "comm_ms_alone", "exchanges", "hidden_share", "ideal_hidden_share", "syncs", "idle_per_sync_ms",
              "host_issue_ms"] + [p + "_ms" for p in pieces]
    comments = [
        "Megatron-Core's combined 1F1B on one GPU: `layers` Qwen3-30B-A3B layer pairs (EP 16, micro batch 1,"
        " 4,096 tokens), a forward layer's attention and experts beside another microbatch's backward ones, in"
        " TransformerLayerSchedulePlan.run's order with one event per microbatch; each all-to-all a copy kernel of"
        " k_ctas CTAs moving 128 MiB no faster than rate_gbps on a second stream (bench/gpu/combined_1f1b.py)",
        "mode overlap: the two streams at one priority (Megatron-Core's default); overlap_high_priority: the"
        " communication stream at high priority (--high-priority-a2a-comm-stream); serial: every node on one"
        " stream; compute_only: no exchanges; _sync: the host waits for the communication stream before each"
        " forward dispatch, as HybridEP's and DeepEP's dispatches make it (cudaStreamSynchronize after the"
        " preprocessing, which waits for the attention). span_ms: the step from the first node to the last"
        " (GPU global timer, median of reps); host_issue_ms: the host's time to issue the step; <piece>_ms:"
        " each piece's median time in that mode",
        "ideal_ms: combined_1f1b.span of the compute_only pieces and the copy alone in the row's order (the step"
        " with nothing shared); hidden_share: (serial span - span) / the exchanges alone (serial_sync's for"
        " overlap_sync), ideal_hidden_share: the"
        " same of the ideal spans; idle_per_sync_ms: (span - the same mode's span without the waits) / syncs,"
        " the GPU's idle after each wait, which pipetab prices at one host call (host_launch_s)"]
    layers, reps = 8, 3
    f_attn, f_mlp, t, h, _ = moe_layer_pieces()
    slots = 2 + 2 * len(pieces) * layers
    pc = Paced(128 * 2**20, slots=slots)
    comp, comm_normal = torch.cuda.Stream(), torch.cuda.Stream()
    comm_high = torch.cuda.Stream(priority=-1)
    x0, dy = randn(t, h), randn(t, h)
    ns = 1e6

    def backward(node, grad):
        inp, out = node
        torch.autograd.backward(out, grad)
        return inp.grad

    def run(mode, ctas, gbps):
        """One step of `layers` pairs in `mode`: (span ms, {piece: [ms per layer]})."""
        torch.cuda.synchronize()
        nodes = []
        with torch.cuda.stream(comp):  # microbatch b's forward, untimed: its graphs for the backward
            x = x0
            for _ in range(layers):
                a = f_attn(x)
                m = f_mlp(a[1])
                nodes.append((a, m))
                x = m[1]
        comp.synchronize()
        syncing = mode.endswith("_sync")
        comm = {"overlap": comm_normal, "overlap_high_priority": comm_high}.get(mode.removesuffix("_sync"), comp)
        fe, be = torch.cuda.Event(), torch.cuda.Event()
        with torch.cuda.stream(comp):
            if HAS_SLEEP:
                torch.cuda._sleep(int(40 * CYCLES_PER_MS))  # the host issues the step meanwhile
            pc.stamp(0, comp)
            fe.record(comp)
            be.record(comp)

        def exchange(ev, sync=False):
            if mode == "compute_only":
                return
            comm.wait_event(ev)
            if sync:
                comm.synchronize()
            pc.launch(ctas, gbps, comm)
            ev.record(comm)

        slot = [2]

        def compute(ev, fn, *args):
            comp.wait_event(ev)
            with torch.cuda.stream(comp):
                pc.stamp(slot[0], comp)
                out = fn(*args)
                pc.stamp(slot[0] + 1, comp)
            slot[0] += 2
            ev.record(comp)
            return out

        x, g = x0, dy
        host0 = time.perf_counter()
        for layer in range(layers):
            b_attn_node, b_mlp_node = nodes[layers - 1 - layer]
            for _, chain, node in c1.LAYER_ORDER:
                ev = fe if chain == "f" else be
                if node in c1.EXCHANGES:
                    exchange(ev, syncing and node == "f_dispatch")
                elif node == "f_attn":
                    fa = compute(ev, f_attn, x)
                elif node == "b_mlp":
                    g = compute(ev, backward, b_mlp_node, g)
                elif node == "f_mlp":
                    fm = compute(ev, f_mlp, fa[1])
                else:
                    g = compute(ev, backward, b_attn_node, g)
            x = fm[1]
        comp.wait_stream(comm)
        pc.stamp(1, comp)
        host_ms = (time.perf_counter() - host0) * 1e3
        torch.cuda.synchronize()
        m = pc.marks.cpu().tolist()
        per = {p: [] for p in pieces}
        for i in range(len(pieces) * layers):  # compute()'s stamps, in the order it ran
            per[pieces[i % len(pieces)]].append((m[3 + 2 * i] - m[2 + 2 * i]) / ns)
        del nodes
        return (m[1] - m[0]) / ns, per, host_ms

    def copy_alone_ms(ctas):
        got = []
        for _ in range(reps):
            torch.cuda.synchronize()
            pc.launch(ctas, 200.0, comp)
            torch.cuda.synchronize()
            first, last = pc.span(ctas)
            got.append((last - first) / ns)
        return statistics.median(got)

    def measure(mode, ctas, gbps):
        spans, per, host = [], {p: [] for p in pieces}, []
        for _ in range(reps):
            s, got, host_ms = run(mode, ctas, gbps)
            spans.append(s)
            host.append(host_ms)
            for p in pieces:
                per[p].extend(got[p])
        return statistics.median(spans), {p: statistics.median(v) for p, v in per.items()}, statistics.median(host)

    run("compute_only", 0, 0.0)  # warm-up: algorithms, workspaces, the allocator
    run("overlap", 16, 200.0)
    rows = []
    base_span, base, base_host = measure("compute_only", 0, 0.0)
    log(f"compute only: {base_span:.3f} ms for {layers} pairs; " +
        ", ".join(f"{p} {base[p]:.3f}" for p in pieces))
    rows.append(dict(mode="compute_only", k_ctas=0, rate_gbps=0.0, layers=layers, reps=reps, span_ms=base_span,
                     ideal_ms=c1.span(base, 0.0, layers, "compute_only"), exchanges=0, syncs=0,
                     host_issue_ms=base_host, **{p + "_ms": base[p] for p in pieces}))
    rows[-1]["span_over_ideal"] = rows[-1]["span_ms"] / rows[-1]["ideal_ms"]
    write_csv("combined.csv", header, rows, comments)
    for ctas in (16, 24):
        if b.over(3.0):
            break
        comm_ms = copy_alone_ms(ctas)
        spans = {}
        for mode in ("serial", "overlap", "overlap_high_priority", "serial_sync", "overlap_sync"):
            if b.over(2.0):
                break
            span_ms, per, host_ms = measure(mode, ctas, 200.0)
            spans[mode] = span_ms
            ideal = c1.span(base, comm_ms, layers, "serial" if mode.startswith("serial") else "overlap")
            syncs = layers if mode.endswith("_sync") else 0
            row = dict(mode=mode, k_ctas=ctas, rate_gbps=200.0, layers=layers, reps=reps, span_ms=span_ms,
                       ideal_ms=ideal, span_over_ideal=span_ms / ideal, comm_ms_alone=comm_ms,
                       exchanges=4 * layers, syncs=syncs, host_issue_ms=host_ms, **{p + "_ms": per[p] for p in pieces})
            if syncs and mode.removesuffix("_sync") in spans:
                row["idle_per_sync_ms"] = (span_ms - spans[mode.removesuffix("_sync")]) / syncs
            serial = "serial_sync" if syncs else "serial"  # the serial step with the same waits
            if not mode.startswith("serial") and serial in spans:
                exchanges_ms = 4 * layers * comm_ms
                row["hidden_share"] = c1.hidden_share(spans[serial], span_ms, exchanges_ms)
                row["ideal_hidden_share"] = c1.hidden_share(c1.span(base, comm_ms, layers, "serial"), ideal,
                                                            exchanges_ms)
            rows.append(row)
            log(f"{mode} k={ctas}: {span_ms:.3f} ms (nothing shared {ideal:.3f}), copy alone {comm_ms:.3f} ms, "
                f"hidden {row.get('hidden_share', float('nan')):.3f} (nothing shared "
                f"{row.get('ideal_hidden_share', float('nan')):.3f}), idle per wait "
                f"{row.get('idle_per_sync_ms', float('nan')):.3f} ms, host {host_ms:.1f} ms")
        write_csv("combined.csv", header, rows, comments)
    del pc, x0, dy
    return rows


def main():
    global CYCLES_PER_MS
    os.makedirs(OUT, exist_ok=True)
    p = torch.cuda.get_device_properties(0)
    info = [f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}",
            f"device {p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB,"
            f" L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB, cc {p.major}.{p.minor}"]
    try:
        import triton as _t
        info.append(f"triton {_t.__version__}")
    except Exception as ex:  # noqa: BLE001
        info.append(f"triton unavailable: {ex!r}")
    try:
        import cupy as _c
        info.append(f"cupy {_c.__version__}")
    except Exception as ex:  # noqa: BLE001
        info.append(f"cupy unavailable: {ex!r}")
    apis = {"torch._scaled_mm": hasattr(torch, "_scaled_mm"), "torch._grouped_mm": hasattr(torch, "_grouped_mm"),
            "torch._scaled_grouped_mm": hasattr(torch, "_scaled_grouped_mm"),
            "F.grouped_mm": hasattr(F, "grouped_mm"), "F.scaled_grouped_mm": hasattr(F, "scaled_grouped_mm"),
            "torch.float8_e4m3fn": FP8 is not None, "torch.cuda._sleep": HAS_SLEEP}
    try:
        from torch.nn.attention import SDPBackend
        apis["SDPBackend.CUDNN_ATTENTION"] = hasattr(SDPBackend, "CUDNN_ATTENTION")
    except Exception:  # noqa: BLE001
        apis["torch.nn.attention"] = False
    info.append("apis: " + ", ".join(f"{k}={int(v)}" for k, v in apis.items()))
    for line in info:
        log(line)

    # bring the clocks up: ~1 s of 8192^3 BF16 GEMMs
    a, w = randn(8192, 8192), randn(8192, 8192)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        for _ in range(20):
            torch.mm(a, w)
        torch.cuda.synchronize()
    s.record()
    for _ in range(20):
        torch.mm(a, w)
    e.record()
    e.synchronize()
    warm = f"warm-up: 8192^3 bf16 mm {2 * 8192**3 / (s.elapsed_time(e) / 20) / 1e9:.0f} TFLOP/s; clocks {smi()}"
    log(warm)
    del a, w
    if HAS_SLEEP:
        s.record()
        torch.cuda._sleep(int(2e7))
        e.record()
        e.synchronize()
        CYCLES_PER_MS = 2e7 / s.elapsed_time(e)
        log(f"torch.cuda._sleep: {CYCLES_PER_MS / 1e6:.3f} Mcycles per ms")
    with open(os.path.join(OUT, "gpu.txt"), "a") as f:
        f.write("software and device (modern_probe.py):\n" + "\n".join(info) + "\n" + warm + "\n")

    sections = [("1", "concurrent", section_concurrent), ("2", "overhead", section_overhead),
                ("3", "fp8", section_fp8), ("4", "grouped", section_grouped), ("5", "attention", section_attention),
                ("6", "overlap", section_overlap), ("7", "combined", section_combined)]
    status = []
    by_key = {key: (name, fn) for key, name, fn in sections}
    for key in SECTIONS:  # in the order PROBE_SECTIONS gives them: the first ones get the time
        if key not in by_key:
            log(f"section {key}: no such section (1-{len(sections)})")
            continue
        name, fn = by_key[key]
        if time.perf_counter() - T0 > TOTAL_S - 5:
            log(f"section {key} {name}: not started, total budget spent")
            status.append(f"{name}: not started")
            continue
        bud = Budget(name, BUDGET_S[key])
        log(f"=== section {key} {name}: budget {bud.left():.0f} s")
        try:
            rows = fn(bud)
            status.append(f"{name}: ok, {len(rows)} rows, {time.perf_counter() - bud.t0:.0f} s, {bud.skipped} skipped for time")
        except Exception:  # noqa: BLE001
            log(f"section {key} {name} failed:\n{traceback.format_exc()}")
            status.append(f"{name}: FAILED after {time.perf_counter() - bud.t0:.0f} s")
        try:
            free()
        except Exception:  # noqa: BLE001
            pass
        log(f"section {key} {name} done; clocks {smi()}")
    for line in status:
        log("status:", line)
    with open(os.path.join(OUT, "gpu.txt"), "a") as f:
        f.write("sections:\n" + "\n".join(status) + "\n")


if __name__ == "__main__":
    main()
