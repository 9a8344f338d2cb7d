#!/usr/bin/python3
"""The layering rule of docs/design.md §5, checked on every #include of src/ and include/.

A file in layer L (src/L/... or include/pipetab/L/...; python/src/ is the layer python) may include its own layer, a layer of
a lower rank, and the foundation headers (include/pipetab/*.hpp: error, precision, allocator).
Layers of the same rank (io and cost; cli and python) are peers and do not include each
other. An include is attributed to a layer by its path: "pipetab/L/...", "../L/..." or
".../src/L/..."; a bare file name is the includer's own folder.

Usage: tests/check_layers.py [SOURCE_DIR]   (default: the repository holding this script)
Runs a self-test first (a made-up tree with an upward include must be reported), then the
real tree. Exit status 0 when the tree obeys the rule, 1 with one line per violation.
Python 3 standard library only.
"""

import os
import re
import sys
import tempfile

# Data flows down this list (docs/design.md §5). Keep it in step with the design document.
RANKS = {
    "table": 0,
    "schedules": 1,
    "formulas": 2,
    "system": 3,
    "parallel": 4,
    "model": 5,
    "io": 6,
    "cost": 6,
    "sim": 7,
    "report": 8,
    "study": 9,
    "cli": 10,
    "python": 10,
    "web": 11,
}
FOUNDATION = "(foundation)"  # include/pipetab/*.hpp and src/*.cpp: below every layer

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of_file(root, path):
    """The layer a source file belongs to, or None when it is outside src/ and include/."""
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "src":
        return FOUNDATION if len(rel) == 2 else rel[1]
    if rel[:2] == ["include", "pipetab"]:
        return FOUNDATION if len(rel) == 3 else rel[2]
    if rel[0] == "python":
        return "python"  # the bindings: above the library, beside the CLI
    return None


def layer_of_include(target, own):
    """The layer an include names (None for a foundation header)."""
    parts = target.split("/")
    if len(parts) == 1:
        return own
    for marker in ("pipetab", "..", "src"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            rest = parts[i + 1:]
            if len(rest) == 1:
                return FOUNDATION  # pipetab/error.hpp, src/allocator.cpp
            return rest[0]
    return parts[0]  # "model/memory.hpp" with src/ on the include path


def allowed(own, other):
    if other == own or other == FOUNDATION:
        return True
    if own == FOUNDATION:
        return False
    return RANKS[other] < RANKS[own]


def check(root):
    problems = []
    for top in ("src", os.path.join("include", "pipetab"), os.path.join("python", "src")):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if not re.search(r"\.(hpp|cpp|h|inc|in)$", name):
                    continue
                path = os.path.join(folder, name)
                own = layer_of_file(root, path)
                rel = os.path.relpath(path, root)
                if own not in RANKS and own != FOUNDATION:
                    problems.append(f"{rel}: folder '{own}' is not a layer of docs/design.md §5 "
                                    f"(add it to RANKS in tests/check_layers.py and to the design)")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        other = layer_of_include(m.group(1), own)
                        if other not in RANKS and other != FOUNDATION:
                            continue  # e.g. "@PROJECT_SOURCE_DIR@/..." resolved above, or a library
                        if not allowed(own, other):
                            problems.append(
                                f"{rel}:{number}: layer '{own}' includes '{m.group(1)}' of layer "
                                f"'{other}': data flows table -> schedules -> formulas -> "
                                f"system -> parallel -> model -> io/cost -> sim -> report -> study -> cli "
                                f"(docs/design.md §5); a lower layer never includes an upper one")
    return problems


def self_test():
    """The checker must flag an upward include, a peer include and an unknown folder, and
    accept downward and same-layer ones; otherwise this test could never fail."""
    with tempfile.TemporaryDirectory() as tmp:
        def write(rel, text):
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        write("include/pipetab/error.hpp", "#pragma once\n")
        write("include/pipetab/table/op.hpp", '#include "pipetab/error.hpp"\n')
        write("src/sim/lower.cpp", '#include "pipetab/table/op.hpp"\n#include "local.hpp"\n')
        write("src/table/timing.cpp", '#include "pipetab/table/op.hpp"\n'
                                      '#include "pipetab/sim/graph.hpp"\n')  # upward
        write("src/cost/gemm.cpp", '#include "pipetab/io/config.hpp"\n')  # peer
        write("src/io/config.cpp", '#include "../study/x.hpp"\n')  # upward, relative
        write("src/widgets/w.cpp", "\n")  # not a layer
        write("python/src/core.cpp", '#include "pipetab/sim/graph.hpp"\n')  # top: fine
        found = check(tmp)
        expect = ["src/cost/gemm.cpp:1:", "src/io/config.cpp:1:",
                  "src/table/timing.cpp:2:", "src/widgets/w.cpp:"]
        got = sorted(p.split(" ")[0] for p in found)
        if got != expect:
            print("check_layers self-test failed: expected", expect, "got", found)
            return False
    return True


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    if not self_test():
        return 1
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layering of docs/design.md §5")
        return 1
    print("check_layers: every include of src/ and include/ follows docs/design.md §5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
