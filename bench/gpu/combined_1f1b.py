#!/usr/bin/env python3
"""Megatron-Core's combined 1F1B step (--overlap-moe-expert-parallel-comm) as the host issues it,
timed with nothing shared: the schedule pipetab's simulation assumes before its slowdowns, against
which modern_probe.py's section 7 (the same step run on one GPU) measures what the GPU's sharing
costs. No torch needed: modern_probe.py and experiments/overlap-schedule import it.

Per layer pair (TransformerLayerSchedulePlan.run, models/common/model_chunk_schedule_plan.py
@d728871; docs/simulation.md, "The combined 1F1B"), a forward layer f and a backward layer b of
other microbatches, in the host's order, each node on its stream after the node before it of its
own pass (one CUDA event per microbatch: ScheduleNode waits for it and records it):

    comm  b  combine backward
    comp  f  attention and router forward           (pre_dispatch_computation)
    comp  b  experts backward                       (mlp, its weight gradients included)
    comm  f  dispatch forward
    comm  b  dispatch backward
    comp  f  experts forward
    comm  f  combine forward
    comp  b  attention and router backward

    python3 bench/gpu/combined_1f1b.py --self-test
"""
import sys

# (stream, pass, node): a compute node takes its piece's time, an exchange (EXCHANGES) the
# all-to-all's.
LAYER_ORDER = (
    ("comm", "b", "b_combine"),
    ("comp", "f", "f_attn"),
    ("comp", "b", "b_mlp"),
    ("comm", "f", "f_dispatch"),
    ("comm", "b", "b_dispatch"),
    ("comp", "f", "f_mlp"),
    ("comm", "f", "f_combine"),
    ("comp", "b", "b_attn"),
)
EXCHANGES = frozenset(("b_combine", "f_dispatch", "b_dispatch", "f_combine"))
PIECES = tuple(node for _, _, node in LAYER_ORDER if node not in EXCHANGES)


def span(pieces, comm_ms, layers, order="overlap"):
    """Milliseconds from the first node's start to the last node's end for `layers` layer pairs.

    pieces: PIECES -> ms alone; comm_ms: one exchange alone.
    order: "overlap" (two streams, each node as soon as its stream and its pass allow),
    "serial" (every node on one stream, in the host's order) or "compute_only" (no exchanges)."""
    if order not in ("overlap", "serial", "compute_only"):
        raise ValueError(f"order: overlap, serial or compute_only, not {order!r}")
    free = {"comp": 0.0, "comm": 0.0}
    done = {"f": 0.0, "b": 0.0}
    for _ in range(layers):
        for stream, chain, node in LAYER_ORDER:
            exchange = node in EXCHANGES
            if exchange and order == "compute_only":
                continue
            ms = comm_ms if exchange else pieces[node]
            if order != "overlap":
                stream = "comp"
            start = max(free[stream], done[chain])
            free[stream] = done[chain] = start + ms
    return max(free.values())


def hidden_share(serial_ms, overlap_ms, comm_total_ms):
    """The share of the exchanges' time the overlap removes from the serial step."""
    return (serial_ms - overlap_ms) / comm_total_ms if comm_total_ms > 0 else float("nan")


def self_test():
    # Worked by hand: attention 0.85, experts backward 1.12, forward 0.59, attention backward
    # 1.74, exchanges 0.9 ms. The combine's backward 0-0.9 beside the attention 0-0.85; the
    # dispatch 0.9-1.8 beside the experts' backward 0.9-2.02; the dispatch's backward 2.02-2.92
    # beside the experts' forward 2.02-2.61; the combine 2.92-3.82 beside the attention's
    # backward 2.92-4.66, after which the next pair starts: 4.66 ms a pair.
    p = {"f_attn": 0.85, "b_mlp": 1.12, "f_mlp": 0.59, "b_attn": 1.74}
    checks = [
        (span(p, 0.9, 1), 4.66),
        (span(p, 0.9, 3), 3 * 4.66),
        (span(p, 0.9, 2, "serial"), 2 * (0.85 + 1.12 + 0.59 + 1.74 + 4 * 0.9)),
        (span(p, 0.9, 2, "compute_only"), 2 * (0.85 + 1.12 + 0.59 + 1.74)),
        # exchanges free: the compute alone; far longer: the four back to back on their stream
        (span(p, 0.0, 4), 4 * (0.85 + 1.12 + 0.59 + 1.74)),
        (span(p, 10.0, 1), 4 * 10.0),
        (hidden_share(10.0, 7.0, 4.0), 0.75),
    ]
    bad = [(got, want) for got, want in checks if abs(got - want) > 1e-9]
    for got, want in bad:
        print(f"combined_1f1b self-test: got {got}, want {want}", file=sys.stderr)
    try:
        span(p, 1.0, 1, "interleaved")
        bad.append(("no error", "ValueError"))
        print("combined_1f1b self-test: an unknown order was accepted", file=sys.stderr)
    except ValueError:
        pass
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
    sys.exit(2)
