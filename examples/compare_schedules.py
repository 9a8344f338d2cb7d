#!/usr/bin/env python3
"""Compare pipeline schedules for one configuration with the pipetab package, and plot them.

    python3 examples/compare_schedules.py [-o schedules.png] [-S 8] [-M 16] \
        [--model gpt3-13b] [--system dgx-h100] [SCHEDULE ...]

Draws, for each schedule, its simulated timeline (one lane per device, ops coloured by kind)
and, beside them, the runtime and the peak activation memory per schedule. Writes a PNG
(matplotlib's Agg backend: no display needed). See docs/python.md.
"""

import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

import pipetab  # noqa: E402

# Forward, full backward, input-gradient and weight-gradient halves of a split backward.
COLOURS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schedules", nargs="*", default=["1f1b", "interleaved", "zb-h1", "zb-v"])
    parser.add_argument("-S", "--devices", type=int, default=4)
    parser.add_argument("-M", "--microbatches", type=int, default=8)
    parser.add_argument("--model", default="gpt3-1.3b")
    parser.add_argument("--system", default="dgx-a100")
    parser.add_argument("-o", "--output", default="schedules.png")
    args = parser.parse_args(argv)

    simulations = {}
    for name in args.schedules:
        try:
            simulations[name] = pipetab.simulate(name, args.devices, args.microbatches,
                                                 model=args.model, system=args.system)
        except pipetab.ParamError as error:  # a schedule that cannot run at this S and M
            print(f"skipped {name}: {error}", file=sys.stderr)
    if not simulations:
        raise SystemExit("no schedule could run")

    rows = len(simulations)
    figure = plt.figure(figsize=(11, 1.2 + 1.1 * rows), constrained_layout=True)
    grid = figure.add_gridspec(rows, 2, width_ratios=[3, 1])
    end = max(sim.runtime_s for sim in simulations.values())
    for row, (name, sim) in enumerate(simulations.items()):
        axes = figure.add_subplot(grid[row, 0])
        ops = sim.to_pandas()
        for kind, group in ops.groupby("kind"):
            axes.barh(group["device"], group["end"] - group["start"], left=group["start"],
                      height=0.8, color=COLOURS.get(kind, "grey"))
        axes.set_xlim(0, end)
        axes.set_ylim(args.devices - 0.5, -0.5)
        axes.set_yticks(range(args.devices))
        axes.set_ylabel("device")
        axes.set_title(f"{name}: {sim.runtime_s:.3f} s, MFU {sim.to_dict()['mfu']:.3f}",
                       fontsize=9, loc="left")
        if row == rows - 1:
            axes.set_xlabel("time (s)")
        if row == 0:
            kinds = [Patch(color=colour, label=kind) for kind, colour in COLOURS.items()]
            axes.legend(handles=kinds, loc="upper right", fontsize=7, ncols=4)

    summary = figure.add_subplot(grid[:, 1])
    names = list(simulations)
    peaks = [sim.per_device()["peak_memory_bytes"].max() / 1e9 for sim in simulations.values()]
    runtimes = [sim.runtime_s for sim in simulations.values()]
    summary.barh(names, runtimes, color="#8172b3")
    summary.invert_yaxis()
    summary.set_xlabel("iteration time (s)")
    for y, (runtime, peak) in enumerate(zip(runtimes, peaks)):
        summary.text(runtime, y, f" {peak:.1f} GB", va="center", fontsize=8)
    summary.set_title("runtime (peak memory)", fontsize=9)
    figure.suptitle(f"S={args.devices} M={args.microbatches}, {args.model} on {args.system}")
    figure.savefig(args.output, dpi=120)
    fastest = min(simulations, key=lambda n: simulations[n].runtime_s)
    print(f"{args.output}: {len(simulations)} schedules; fastest {fastest}")


if __name__ == "__main__":
    main()
