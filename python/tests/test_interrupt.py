"""Ctrl-C stops long runs with KeyboardInterrupt, promptly, while the GIL is released."""

import signal
import textwrap
import threading
import time

import pytest

import pipetab
from conftest import SLOW, run_python

LONG_STUDY = """
name = "long"
[grid]
schedules = ["1f1b", "gpipe", "interleaved", "zb-h1", "zb-v", "dualpipe"]
devices = [8, 16, 32]
microbatches = { from = 8, to = 1024, times = 2 }
systems = ["balanced", "network-bound", "compute-bound"]
bandwidth_scale = [0.25, 0.5, 1, 2, 4]
latency_scale = [0.5, 1, 2]
"""

CASES = {
    "sweep": "pipetab.sweep(study, jobs=1)",
    "tune": "pipetab.tune(96, 384, model='gpt3-175b', system='dgx-a100')",  # ~20 s of CPU
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ctrl_c_raises_keyboard_interrupt(tmp_path, case):
    study = tmp_path / "long.toml"
    study.write_text(LONG_STUDY)
    code = textwrap.dedent(f"""
        import sys, time
        import pipetab
        study = {str(study)!r}
        print("started", flush=True)
        start = time.monotonic()
        try:
            {CASES[case]}
        except KeyboardInterrupt:
            print(f"interrupted {{time.monotonic() - start:.3f}}", flush=True)
            raise
        print("finished", flush=True)
    """)
    child = run_python(code)
    assert child.stdout.readline().strip() == "started"
    time.sleep(1.0 * SLOW)  # well inside the run (it takes minutes)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=10 * SLOW)
    except Exception:
        child.kill()
        raise
    stopped = time.monotonic() - sent
    assert "finished" not in out, "the run ended before Ctrl-C: make it longer"
    assert "interrupted" in out, (out, err)
    assert "KeyboardInterrupt" in err
    assert child.returncode != 0
    assert stopped < 5 * SLOW, f"took {stopped:.2f} s to stop"


def test_gil_is_released_during_a_sweep(tmp_path):
    # Another thread keeps running Python while the sweep runs.
    study = tmp_path / "study.toml"
    study.write_text(LONG_STUDY.replace("to = 1024", "to = 64").replace(
        '"interleaved", "zb-h1", "zb-v", "dualpipe"', '"zb-h1"'))
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=tick)
    thread.start()
    start = time.monotonic()
    try:
        pipetab.sweep(study, jobs=1)
    finally:
        done.set()
        thread.join()
    elapsed = time.monotonic() - start
    during = [t for t in ticks if start <= t <= start + elapsed]
    # With the GIL held the ticker would not run at all until the sweep returned.
    assert elapsed < 0.05 or len(during) >= min(5, elapsed / 0.05), (elapsed, len(during))
