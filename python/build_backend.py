"""pipetab's wheel builder: a PEP 517 build backend for `pip install ./python`, and the packer
behind `cmake --build build --target wheel`. Standard library only (no setuptools, no wheel).

The extension module is built by the repository's CMake project (target pipetab_python), the
one build description the command and the tests share; this file only runs that build and puts
its output, with the package's Python files, into a wheel:

    pipetab/__init__.py, pipetab/_core.pyi, pipetab/py.typed, pipetab/_core<EXT_SUFFIX>
    pipetab-<version>.dist-info/{METADATA,WHEEL,top_level.txt,RECORD}

The version is CMake's project version (CMakeLists.txt), the other metadata pyproject.toml's
[project] table. The wheel is tagged for the interpreter that runs this file, which must be the
one the module was built for (checked by the module's file name).

As a PEP 517 backend (pyproject.toml), `build_wheel` configures and builds with CMake, its output
streamed (`pip install -v ./python` shows it as it comes), in build-pip/<interpreter> (e.g.
build-pip/cpython-311-1a2b3c4d) of the repository,
or in the CMake build folder given by `--config-settings=build-dir=PATH` (or the environment's
PIPETAB_BUILD_DIR), e.g. the README's build/: then only what changed is compiled.

As a script:

    python3 python/build_backend.py pack --module build/python/pipetab/_core....so --out build/dist
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import pathlib
import re
import shlex
import subprocess
import sys
import sysconfig
import time
import zipfile

if sys.version_info < (3, 11):  # tomllib, here and in the package (pipetab.preset)
    raise RuntimeError(
        f"pipetab needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable})"
    )

import tomllib  # noqa: E402  (after the version check, for its message)

PYTHON_DIR = pathlib.Path(__file__).resolve().parent
REPOSITORY = PYTHON_DIR.parent
PACKAGE = PYTHON_DIR / "pipetab"
# The package's files besides the extension module: sources, the module's stub, the PEP 561 marker.
PACKAGE_FILES = ("__init__.py", "_core.pyi", "py.typed")


def project_version() -> str:
    """The `VERSION` of CMakeLists.txt's project(), pipetab's one version number."""
    text = (REPOSITORY / "CMakeLists.txt").read_text(encoding="utf-8")
    match = re.search(r"^project\(\s*pipetab\s+VERSION\s+([0-9][0-9.]*)", text, re.MULTILINE)
    if not match:
        raise RuntimeError("CMakeLists.txt: no `project(pipetab VERSION x.y.z ...)`")
    return match.group(1)


def _project() -> dict:
    with open(PYTHON_DIR / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]


def metadata() -> str:
    """The wheel's METADATA (core metadata 2.1) from pyproject.toml's [project]."""
    project = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project_version()}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {requirement}" for requirement in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    readme = PYTHON_DIR / project["readme"]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")


def _tag() -> str:
    """python-abi-platform of this interpreter, e.g. cp311-cp311-linux_x86_64."""
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{python}-{python}{sys.abiflags}-{platform}"


def _dist_info() -> str:
    return f"pipetab-{project_version()}.dist-info"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def pack(module: os.PathLike | str, out: os.PathLike | str) -> pathlib.Path:
    """Writes the wheel of an already built extension module into `out`; returns its path.
    Nothing is compiled. Refuses a module built for another interpreter than this one."""
    module = pathlib.Path(module)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not module.is_file():
        raise SystemExit(f"pack: {module}: no such file (build the target pipetab_python first)")
    if module.name != "_core" + suffix:
        raise SystemExit(
            f"pack: {module.name} is not built for this interpreter ({sys.executable}, which "
            f"loads _core{suffix}): run the packer with the Python the module was built for"
        )
    files: list[tuple[str, bytes]] = []
    for name in PACKAGE_FILES:
        files.append((f"pipetab/{name}", (PACKAGE / name).read_bytes()))
    files.append((f"pipetab/{module.name}", module.read_bytes()))
    dist_info = _dist_info()
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: pipetab python/build_backend.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {_tag()}\n"
    )
    files += [
        (f"{dist_info}/METADATA", metadata().encode()),
        (f"{dist_info}/WHEEL", wheel.encode()),
        (f"{dist_info}/top_level.txt", b"pipetab\n"),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pipetab-{project_version()}-{_tag()}.whl"
    # Reproducible: fixed times (SOURCE_DATE_EPOCH when set) and modes.
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o755 if name.endswith(suffix) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    partial.replace(path)
    return path


# ------------------------------------------------------------------------------------------------
# CMake


def _cache_value(build: pathlib.Path, name: str) -> str | None:
    cache = build / "CMakeCache.txt"
    if not cache.exists():
        return None
    for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    return None


def _run(command: list[str]) -> None:
    # To stderr, unbuffered: pip shows it as it comes with -v (and all of it when a build fails).
    print("+ " + shlex.join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=sys.stderr)


def build_module(build_dir: str | None = None) -> pathlib.Path:
    """Builds the target pipetab_python for this interpreter; returns the module's path. With
    `build_dir`, an existing CMake build folder is reused as configured (only what changed is
    compiled); without, build-pip/<interpreter> of the repository (configured on first use)."""
    if build_dir:
        # Relative to where the command was typed: pip runs the hooks in python/, but the shell's
        # PWD comes through the environment.
        build = pathlib.Path(os.environ.get("PWD", os.getcwd()), build_dir).resolve()
        if not (build / "CMakeCache.txt").exists():
            raise SystemExit(f"build-dir {build}: not a configured CMake build folder")
    else:
        # One folder per interpreter (cpython-311-<its prefix's hash>): switching Pythons, e.g.
        # Debian's and pyenv's 3.11, never reuses a build configured for another.
        prefix = hashlib.sha256(os.path.realpath(sys.base_prefix).encode()).hexdigest()[:8]
        build = REPOSITORY / "build-pip" / f"{sys.implementation.cache_tag}-{prefix}"
        configure = [
            "cmake", "-S", str(REPOSITORY), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DPIPETAB_TESTS=OFF", "-DPIPETAB_BENCH=OFF", "-DPIPETAB_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        # Extra CMake arguments, e.g. CMAKE_ARGS=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache.
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        if not (build / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        _run(configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    _run(["cmake", "--build", str(build), "--target", "pipetab_python", "-j", jobs])
    package_dir = _cache_value(build, "PIPETAB_PYTHON_DIR") or str(build / "python")
    module = pathlib.Path(package_dir) / "pipetab" / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not module.exists():
        built = _cache_value(build, "Python3_EXECUTABLE")
        raise SystemExit(
            f"{build} builds the module for {built}, not for {sys.executable}: reconfigure it "
            f"with -DPython3_EXECUTABLE={sys.executable}, or leave build-dir out"
        )
    return module


# ------------------------------------------------------------------------------------------------
# PEP 517


def _build_dir(config_settings: dict | None) -> str | None:
    settings = config_settings or {}
    return settings.get("build-dir") or os.environ.get("PIPETAB_BUILD_DIR") or None


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    directory = pathlib.Path(metadata_directory) / _dist_info()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "METADATA").write_text(metadata(), encoding="utf-8")
    return directory.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    module = build_module(_build_dir(config_settings))
    return pack(module, wheel_directory).name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packer = commands.add_parser("pack", help="the wheel of an already built module (no compiling)")
    packer.add_argument("--module", required=True, help="the built pipetab/_core<EXT_SUFFIX>")
    packer.add_argument("--out", required=True, help="folder to write the wheel into")
    builder = commands.add_parser("build", help="build the module with CMake, then pack it")
    builder.add_argument("--build-dir", help="an existing CMake build folder to reuse")
    builder.add_argument("--out", required=True, help="folder to write the wheel into")
    args = parser.parse_args(argv)
    start = time.monotonic()
    module = args.module if args.command == "pack" else build_module(args.build_dir)
    path = pack(module, args.out)
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
