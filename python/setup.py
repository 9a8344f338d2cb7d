"""Builds pipetab._core with the repository's CMake project (the target pipetab_python), so that
the package and the command share one build description. Used by
`pip install --no-build-isolation ./python` (pyproject.toml; docs/python.md)."""

import os
import pathlib
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# Build outputs go under the repository's ignored build-pip/, not into the source tree.
BUILD = REPOSITORY / "build-pip"
BUILD.mkdir(exist_ok=True)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # CMake writes <dir>/pipetab/_core<suffix>, where setuptools expects the module.
        package_parent = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent
        build = BUILD / "cmake"
        configure = [
            "cmake", "-S", str(REPOSITORY), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DPIPETAB_TESTS=OFF", "-DPIPETAB_BENCH=OFF", "-DPIPETAB_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}", f"-DPIPETAB_PYTHON_DIR={package_parent}",
        ]
        # Extra CMake arguments, e.g. CMAKE_ARGS=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache.
        configure += os.environ.get("CMAKE_ARGS", "").split()
        if not (build / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", str(build), "--target", "pipetab_python",
                               "-j", jobs])


setup(
    ext_modules=[CMakeExtension("pipetab._core")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD / "setuptools")},
             "egg_info": {"egg_base": str(BUILD)}},
)
