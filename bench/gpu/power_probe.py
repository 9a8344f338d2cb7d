#!/usr/bin/env python3
"""Measures, on one NVIDIA GPU through PyTorch, what a GPU holds in training that a short
microbenchmark does not show, and the host link that activation offload uses:

  1 sustained  four loads run back to back for SUSTAIN_S seconds each, as training runs them:
               BF16 GEMMs (8192^3), FP8 GEMMs (8192^3, torch._scaled_mm, per-tensor scales), a
               transformer layer's forward + backward (a Llama-3-8B-shaped block, BF16, flash
               attention, sequence 4096), and an HBM copy. Throughput is timed in ~0.2 s chunks
               (CUDA events) while a sampler thread reads the SM clock, power, temperature and the
               clock-event (throttle) reasons through NVML every 50 ms. The card's settings are
               read, never changed (no power limit, clock lock or application clocks are set).
  2 hostlink   pinned host memory <-> device copies (cudaMemcpyAsync through tensor.copy_) at
               1 MiB..1 GiB: host-to-device and device-to-host alone, both directions at once on
               two streams, and host-to-device beside a BF16 GEMM loop on another stream (the
               copy's rate and the GEMM's slowdown), as an offloading runtime overlaps them.

Usage:  python3 bench/gpu/power_probe.py OUT_DIR     (or bench/gpu/run-power-probe OUT_DIR)
Writes OUT_DIR/sustained.csv (workload, chunk end time, throughput), OUT_DIR/clocks.csv (NVML
samples), OUT_DIR/sustained-summary.csv (per workload: the first second against the last half)
and OUT_DIR/hostlink.csv. Environment: PROBE_SECTIONS (default "1,2"), SUSTAIN_S (default 40).
Not part of the CMake build: CI has no GPU. The committed results are under data/gpu/.
"""
import os
import statistics
import sys
import threading
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
SECTIONS = [s.strip() for s in os.environ.get("PROBE_SECTIONS", "1,2").split(",") if s.strip()]
SUSTAIN_S = float(os.environ.get("SUSTAIN_S", "40"))
DEV = "cuda"
BF16 = torch.bfloat16
T0 = time.perf_counter()


def log(*a):
    print(f"[{time.perf_counter() - T0:7.1f}s]", *a, flush=True)


class Sampler:
    """NVML samples every `period` s on a thread; falls back to nothing if NVML is missing."""

    def __init__(self, period=0.05):
        self.period = period
        self.rows = []
        self.label = "idle"
        self.stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            self.reasons = reasons or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1000
            log(f"NVML ok; enforced power limit {limit:.0f} W")
            self.power_limit_w = limit
        except Exception as e:  # noqa: BLE001
            log("NVML unavailable:", e)
            self.nv = None
            self.power_limit_w = float("nan")
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        nv = self.nv
        while not self.stop.is_set():
            t = time.perf_counter() - T0
            try:
                sm = nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM)
                mem = nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_MEM)
                power = nv.nvmlDeviceGetPowerUsage(self.h) / 1000
                temp = nv.nvmlDeviceGetTemperature(self.h, nv.NVML_TEMPERATURE_GPU)
                why = self.reasons(self.h)
                self.rows.append((self.label, t, sm, mem, power, temp, why))
            except Exception as e:  # noqa: BLE001
                log("NVML sample failed:", e)
                return
            time.sleep(self.period)

    def start(self):
        if self.nv:
            self.thread.start()

    def close(self):
        self.stop.set()
        if self.nv:
            self.thread.join()


def timed_chunks(label, body, work_per_call, seconds, sampler, rows, chunk_s=0.2):
    """Calls body() in chunks of about chunk_s GPU seconds for `seconds`; records each chunk's
    throughput (work_per_call units per second) with its end time."""
    body()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    body()
    e.record()
    e.synchronize()
    per_call = max(s.elapsed_time(e) / 1e3, 1e-6)
    n = max(1, int(chunk_s / per_call))
    sampler.label = label
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        s.record()
        for _ in range(n):
            body()
        e.record()
        e.synchronize()
        dt = s.elapsed_time(e) / 1e3
        rows.append((label, time.perf_counter() - T0, n * work_per_call / dt))
    sampler.label = "idle"


class Block(nn.Module):
    """A Llama-3-8B-shaped decoder layer: RMSNorm, GQA attention (32 heads, 8 KV heads, 128
    dims), RMSNorm, SwiGLU MLP 14336; BF16 weights."""

    def __init__(self, h=4096, heads=32, kv=8, ffn=14336):
        super().__init__()
        self.h, self.heads, self.kv, self.d = h, heads, kv, h // heads
        self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.qkv = nn.Linear(h, (heads + 2 * kv) * self.d, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.up = nn.Linear(h, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split(
            [self.heads * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(b, s, self.heads, self.d).transpose(1, 2)
        k = k.view(b, s, self.kv, self.d).transpose(1, 2)
        v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, self.h))
        g, u = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def sustained(sampler):
    rows = []
    n = 8192
    a = torch.randn(n, n, device=DEV, dtype=BF16)
    b = torch.randn(n, n, device=DEV, dtype=BF16)
    c = torch.empty(n, n, device=DEV, dtype=BF16)
    loads = [("bf16_gemm_8192", lambda: torch.mm(a, b, out=c), 2 * n**3 / 1e12, "TFLOP/s")]
    if hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm"):
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=DEV)
        loads.append(("fp8_gemm_8192",
                      lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=BF16),
                      2 * n**3 / 1e12, "TFLOP/s"))
    seq, h, ffn = 4096, 4096, 14336
    block = Block().to(DEV, BF16)
    x = torch.randn(1, seq, h, device=DEV, dtype=BF16, requires_grad=True)
    lin = h * (32 + 16) * 128 + h * h + h * 2 * ffn + ffn * h
    # Model FLOPs of forward + backward: 6 per linear parameter per token, and causal attention's
    # executed half of 4·s²·h forward, twice that backward (no recompute counted).
    layer_flops = 6 * lin * seq + 3 * 2 * seq * seq * h

    def step():
        y = block(x)
        y.backward(torch.ones_like(y))

    loads.append(("llama8b_layer_step", step, layer_flops / 1e12, "TFLOP/s"))
    big = torch.empty(1 << 30, device=DEV, dtype=torch.uint8)
    dst = torch.empty_like(big)
    loads.append(("hbm_copy_1GiB", lambda: dst.copy_(big), 2 * big.numel() / 1e9, "GB/s"))
    for label, body, work, unit in loads:
        try:
            log(f"{label}: {SUSTAIN_S:.0f} s ({unit})")
            timed_chunks(label, body, work, SUSTAIN_S, sampler, rows)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        time.sleep(3)  # idle between loads, sampled as "idle"
    with open(os.path.join(OUT, "sustained.csv"), "w") as f:
        f.write("workload,t_s,throughput\n")
        for label, t, v in rows:
            f.write(f"{label},{t:.3f},{v:.2f}\n")
    return rows, {l: u for l, _, _, u in loads}


def summarise(rows, units, sampler):
    out = ["workload,unit,first_s_throughput,last_half_throughput,ratio,"
           "first_s_sm_mhz,last_half_sm_mhz,last_half_power_w,last_half_temp_c,"
           "last_half_power_capped_share"]
    for label in units:
        pts = [(t, v) for l, t, v in rows if l == label]
        if not pts:
            continue
        t0, t1 = pts[0][0], pts[-1][0]
        first = [v for t, v in pts if t <= t0 + 1.0]
        half = [v for t, v in pts if t >= (t0 + t1) / 2]
        cl = [r for r in sampler.rows if r[0] == label]
        c_first = [r[2] for r in cl if r[1] <= t0 + 1.0] or [float("nan")]
        c_half = [r for r in cl if r[1] >= (t0 + t1) / 2]
        sm = statistics.median([r[2] for r in c_half]) if c_half else float("nan")
        pw = statistics.median([r[4] for r in c_half]) if c_half else float("nan")
        tc = statistics.median([r[5] for r in c_half]) if c_half else float("nan")
        # NVML clock-event reason bits: 0x4 SW power cap, 0x80 HW power brake (nvml.h).
        capped = (sum(1 for r in c_half if r[6] & (0x4 | 0x80)) / len(c_half)) if c_half else float("nan")
        f, hv = statistics.median(first), statistics.median(half)
        out.append(f"{label},{units[label]},{f:.1f},{hv:.1f},{hv / f:.4f},"
                   f"{statistics.median(c_first):.0f},{sm:.0f},{pw:.1f},{tc:.0f},{capped:.3f}")
    with open(os.path.join(OUT, "sustained-summary.csv"), "w") as fh:
        fh.write("\n".join(out) + "\n")
    for line in out:
        log(line)


def copy_rate(dst, src, stream, reps=5):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)
        for _ in range(reps):
            s.record(stream)
            dst.copy_(src, non_blocking=True)
            e.record(stream)
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
    return src.numel() / statistics.median(times) / 1e9


def hostlink():
    rows = ["case,bytes,h2d_gb_per_s,d2h_gb_per_s,gemm_slowdown"]
    s1, s2, s3 = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    sizes = [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    host2 = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    dev2 = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    for n in sizes:
        h2d = copy_rate(dev[:n], host[:n], s1)
        d2h = copy_rate(host2[:n], dev2[:n], s2)
        rows.append(f"alone,{n},{h2d:.2f},{d2h:.2f},")
        log(rows[-1])
    # Both directions at once: each stream's bytes over the wall time of the pair.
    for n in sizes[2:]:
        reps = 5
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            with torch.cuda.stream(s1):
                dev[:n].copy_(host[:n], non_blocking=True)
            with torch.cuda.stream(s2):
                host2[:n].copy_(dev2[:n], non_blocking=True)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / reps
        rows.append(f"duplex,{n},{n / dt / 1e9:.2f},{n / dt / 1e9:.2f},")
        log(rows[-1])
    # Host-to-device beside a BF16 GEMM loop: both timed over the same wall interval.
    m = 8192
    a = torch.randn(m, m, device=DEV, dtype=BF16)
    b = torch.randn(m, m, device=DEV, dtype=BF16)
    c = torch.empty(m, m, device=DEV, dtype=BF16)
    gs, ge = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gemms(k, stream):
        with torch.cuda.stream(stream):
            gs.record(stream)
            for _ in range(k):
                torch.mm(a, b, out=c)
            ge.record(stream)

    gemms(5, s3)
    torch.cuda.synchronize()
    gemms(40, s3)
    ge.synchronize()
    alone = gs.elapsed_time(ge) / 40
    for direction in ("h2d", "d2h"):
        n = 1 << 30
        gemms(40, s3)
        cs, ce = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s1):
            cs.record(s1)
            for _ in range(4):
                if direction == "h2d":
                    dev[:n].copy_(host[:n], non_blocking=True)
                else:
                    host2[:n].copy_(dev2[:n], non_blocking=True)
            ce.record(s1)
        torch.cuda.synchronize()
        rate = 4 * n / (cs.elapsed_time(ce) / 1e3) / 1e9
        slow = (gs.elapsed_time(ge) / 40) / alone
        h2d, d2h = (f"{rate:.2f}", "") if direction == "h2d" else ("", f"{rate:.2f}")
        rows.append(f"beside_bf16_gemm,{n},{h2d},{d2h},{slow:.4f}")
        log(rows[-1])
    with open(os.path.join(OUT, "hostlink.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    p = torch.cuda.get_device_properties(0)
    log(f"torch {torch.__version__}, device {p.name}, {p.multi_processor_count} SMs")
    sampler = Sampler()
    sampler.start()
    status = 0
    try:
        if "1" in SECTIONS:
            try:
                rows, units = sustained(sampler)
                summarise(rows, units, sampler)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                status = 1
        if "2" in SECTIONS:
            try:
                hostlink()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                status = 1
    finally:
        sampler.close()
        with open(os.path.join(OUT, "clocks.csv"), "w") as f:
            f.write("workload,t_s,sm_mhz,mem_mhz,power_w,temp_c,clock_event_reasons\n")
            for r in sampler.rows:
                f.write(f"{r[0]},{r[1]:.3f},{r[2]},{r[3]},{r[4]:.1f},{r[5]},{r[6]:#x}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
