"""Shared fixtures: the built `pipetab` command, to compare the package with, and the sources."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("PIPETAB_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
# Set by ctest; by hand: PIPETAB_BINARY=build/pipetab PYTHONPATH=build/python python3 -m pytest ...
BINARY = os.environ.get("PIPETAB_BINARY", str(SOURCE_DIR / "build" / "pipetab"))
# Under AddressSanitizer everything runs several times slower.
SLOW = 5.0 if os.environ.get("PIPETAB_SANITIZE") else 1.0


class Cli:
    """Runs the pipetab command."""

    def run(self, *args, cwd=None):
        return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, cwd=cwd)

    def json(self, *args):
        result = self.run(*args, "--format", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def text(self, *args):
        result = self.run(*args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def error(self, *args):
        """The message of a failing command (its one stderr line without 'pipetab: error: ')."""
        result = self.run(*args)
        assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
        line = result.stderr.strip()
        assert line.startswith("pipetab: error: "), line
        return line[len("pipetab: error: "):]


@pytest.fixture(scope="session")
def cli():
    if not os.path.exists(BINARY):
        pytest.skip(f"the pipetab command is not built at {BINARY} (set PIPETAB_BINARY)")
    return Cli()


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


def run_python(code, **kwargs):
    """Runs `code` in a fresh interpreter with this one's module path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)
