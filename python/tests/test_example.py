"""examples/compare_schedules.py runs and writes a PNG."""

import subprocess
import sys

import pytest

from conftest import SOURCE_DIR, run_python


def test_compare_schedules_example(tmp_path):
    pytest.importorskip("matplotlib", reason="the example plots with matplotlib (python3-matplotlib)")
    pytest.importorskip("pandas", reason="the example uses to_pandas() (python3-pandas)")
    output = tmp_path / "schedules.png"
    script = SOURCE_DIR / "examples" / "compare_schedules.py"
    child = run_python(f"import runpy, sys; sys.argv = ['x', '-o', {str(output)!r}, "
                       f"'1f1b', 'zb-v', 'chimera', '-S', '4', '-M', '8']; "
                       f"runpy.run_path({str(script)!r}, run_name='__main__')")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert "3 schedules" in out
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
