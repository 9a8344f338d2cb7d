"""The package as a package: version, dependencies at run time, the wheel, keywords and types,
readable results, and a run's pictures (issue 23, point 5)."""

import base64
import csv
import gzip
import hashlib
import inspect
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import typing
import xml.etree.ElementTree as ET
import zipfile
from typing import Literal, Union

import pytest

import pipetab
from conftest import SOURCE_DIR

MODEL, SYSTEM = "gpt3-1.3b", "dgx-a100"  # explicit presets, not the command's default
SVG = "{http://www.w3.org/2000/svg}"


def cmake_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    return re.search(r"^project\(\s*pipetab\s+VERSION\s+([0-9.]+)", text, re.M).group(1)


def test_version_is_the_cmake_project_version(cli):
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", pipetab.__version__)
    assert pipetab.__version__ == cmake_version()
    assert cli.run("--version").stdout.split()[-1] == pipetab.__version__


def needed(path):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True, check=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


@pytest.mark.parametrize("which", ["module", "command"])
def test_no_shared_fmt_or_tomlplusplus_at_run_time(cli, which):
    from conftest import BINARY

    path = pipetab._core.__file__ if which == "module" else BINARY
    libraries = needed(path)
    assert any(name.startswith("libstdc++") for name in libraries), libraries  # parsed for real
    assert [name for name in libraries if "fmt" in name or "toml" in name] == []


def test_declared_python_is_the_one_the_package_needs():
    pyproject = (SOURCE_DIR / "python" / "pyproject.toml").read_text()
    declared = re.search(r'^requires-python = ">=([0-9]+)\.([0-9]+)"', pyproject, re.M)
    minimum = (int(declared.group(1)), int(declared.group(2)))
    sources = (SOURCE_DIR / "python" / "pipetab" / "__init__.py").read_text()
    if re.search(r"^import tomllib", sources, re.M):
        assert minimum >= (3, 11)  # tomllib is new in 3.11
    assert sys.version_info[:2] >= minimum


def public_functions():
    return [getattr(pipetab, name) for name in pipetab.__all__
            if inspect.isfunction(getattr(pipetab, name))]


def test_public_functions_take_named_keywords_with_types_and_docs():
    functions = public_functions()
    assert len(functions) >= 13
    for function in functions:
        signature = inspect.signature(function)
        kinds = {p.kind for p in signature.parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, function.__name__
        assert inspect.Parameter.VAR_POSITIONAL not in kinds, function.__name__
        for parameter in signature.parameters.values():
            assert parameter.annotation is not inspect.Parameter.empty, (function.__name__,
                                                                       parameter.name)
        assert signature.return_annotation is not inspect.Signature.empty, function.__name__
        assert function.__doc__ and len(function.__doc__) > 40, function.__name__
    simulation = ["system", "model", "dp", "contention", "blocking_send", "runtime", "tp_overlap",
                  "optimizer", "dp_overlap", "dp_bucket_mb", "distributed_optimizer",
                  "overheads", "costs", "input_grad_frees"]
    for function in (pipetab.analyze, pipetab.simulate, pipetab.compare, pipetab.tune):
        parameters = inspect.signature(function).parameters
        assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in simulation)
        assert "``overheads``" in function.__doc__  # the keywords are documented
    assert {"trace", "svg"} <= set(inspect.signature(pipetab.simulate).parameters)
    with pytest.raises(TypeError, match="no_such_option"):
        pipetab.simulate("1f1b", 4, 8, no_such_option=1)


# The keywords named after a flag that differs from its option's key (sim/options.hpp).
ALIASES = {"tp": "tensor_parallel", "cp": "context_parallel", "dp": "data_parallel",
           "ep": "expert_parallel", "etp": "expert_tensor_parallel",
           "dp_bucket_mb": "dp_bucket_bytes"}


def test_run_options_typed_dict_is_the_library_list():
    # RunOptions (the keywords' documentation and types) cannot drift from the one definition of
    # every option in C++: exactly its keys and the aliases, each typed as the option takes it.
    options = {o["key"]: o for o in pipetab.run_options()}
    hints = typing.get_type_hints(pipetab.RunOptions)
    assert set(hints) == set(options) | set(ALIASES)
    types = {"integer": int, "number": float, "boolean": bool, "text": str}
    for keyword, hint in hints.items():
        option = options[ALIASES.get(keyword, keyword)]
        if keyword == "fsdp":
            assert hint == Union[bool, pipetab.FSDP]
        elif option["type"] == "choice":
            assert hint == Literal[tuple(option["choices"])], keyword
        elif option["type"] == "tristate":
            assert hint == Union[bool, Literal["auto"]], keyword
        else:
            assert hint is types[option["type"]], keyword
    for key, option in options.items():
        assert option["keywords"] == [key] + [a for a, k in ALIASES.items() if k == key]
        assert {"flag", "group", "type", "help", "min", "max", "choices"} <= set(option)
    # plan takes every option it does not search; chunks is its own search keyword.
    searched = set(pipetab._core.plan_searched())
    plan_hints = typing.get_type_hints(pipetab.PlanOptions)
    assert set(plan_hints) == {k for k in hints if ALIASES.get(k, k) not in searched} - {"chunks"}
    assert {"seq_len", "runtime", "tp_overlap", "dp_overlap", "overheads"} <= set(plan_hints)
    # Every function shows every keyword it takes, keyword-only and None by default.
    for function, taken in ((pipetab.analyze, hints), (pipetab.simulate, hints),
                            (pipetab.compare, hints), (pipetab.tune, hints),
                            (pipetab.plan, plan_hints)):
        parameters = inspect.signature(function).parameters
        assert set(taken) <= set(parameters), function.__name__
        assert ":func:`run_options`" in function.__doc__, function.__name__


def test_py_typed_and_stub_beside_the_module():
    package = pathlib.Path(pipetab.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_core.pyi").read_text()
    for name in ("class SimulationRun", "def svg", "def write_trace", "__version__: str"):
        assert name in stub


# ------------------------------------------------------------------------------------------------
# The wheel


def record_ok(archive):
    names = set(archive.namelist())
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(archive.read(record).decode())))
    assert {row[0] for row in rows} == names
    for name, digest, size in rows:
        if name == record:
            continue
        data = archive.read(name)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(data)), name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "python" / "build_backend.py"), "pack",
         "--module", pipetab._core.__file__, "--out", str(out)],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 60  # packs, compiles nothing
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_holds_the_package_typed_and_tagged(wheel):
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"pipetab-{pipetab.__version__}-{python}-{python}-linux_")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        module = "pipetab/_core" + sysconfig.get_config_var("EXT_SUFFIX")
        assert {"pipetab/__init__.py", "pipetab/py.typed", "pipetab/_core.pyi", module} <= names
        assert archive.read(module) == pathlib.Path(pipetab._core.__file__).read_bytes()
        dist_info = f"pipetab-{pipetab.__version__}.dist-info"
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        assert f"\nVersion: {pipetab.__version__}\n" in metadata
        assert "\nRequires-Python: >=3.11\n" in metadata
        assert "\nRequires-Dist: numpy\n" in metadata
        assert "Root-Is-Purelib: false" in archive.read(f"{dist_info}/WHEEL").decode()
        record_ok(archive)


def test_wheel_installs_into_a_fresh_venv_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    # Debian's numpy from the system site (no index: the test runs offline).
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"python3 -m venv does not work here (python3-venv): {made.stderr[-300:]}")
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    deps = []
    if subprocess.run([str(python), "-c", "import numpy"], env=env,
                      capture_output=True).returncode != 0:
        # An interpreter without numpy in its system site (pyenv's): this one's numpy, on the path.
        import numpy

        env["PYTHONPATH"] = str(pathlib.Path(numpy.__file__).parents[1])
        deps = ["--no-deps"]
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", *deps, str(wheel)],
        capture_output=True, text=True, env=env, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    code = ("import json, pipetab; s = pipetab.simulate('1f1b', 4, 8, model='gpt3-1.3b', "
            "system='dgx-a100'); print(json.dumps([pipetab.__version__, pipetab.__file__, "
            "s.runtime_s]))")
    ran = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    version, path, runtime = json.loads(ran.stdout)
    assert version == pipetab.__version__
    assert pathlib.Path(path).resolve().is_relative_to(venv.resolve())
    assert runtime == pipetab.simulate("1f1b", 4, 8, model=MODEL, system=SYSTEM).runtime_s


# ------------------------------------------------------------------------------------------------
# Readable results


def seconds_in(text):
    """The first time in a repr, in seconds ("1.234 s", "56.7 ms")."""
    match = re.search(r"([0-9.]+) (s|ms|µs)\b", text)
    return float(match.group(1)) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[match.group(2)]


def html_root(text):
    return ET.fromstring(f"<root>{text}</root>")  # well-formed: escaped text, closed tags


def test_simulation_repr_names_the_run_and_its_numbers():
    s = pipetab.simulate("zb-v", 4, 8, model=MODEL, system=SYSTEM)
    text = repr(s)
    assert text.startswith("<pipetab.Simulation zb-v S=4 M=8 on dgx-a100 (gpt3-1.3b): ")
    assert seconds_in(text) == pytest.approx(s.runtime_s, rel=1e-3)
    assert "idle" in text and "per device" in text
    root = html_root(s._repr_html_())
    cells = [td.text for td in root.iter("td")]
    assert "runtime" in cells
    assert seconds_in(cells[cells.index("runtime") + 1]) == pytest.approx(s.runtime_s, rel=1e-3)
    assert root.find(f".//{SVG}svg") is not None  # the timeline, inline


def test_analysis_repr_has_all_levels():
    a = pipetab.analyze("1f1b", 4, 8, model=MODEL, system=SYSTEM)
    text = repr(a)
    assert text.startswith("<pipetab.Analysis 1f1b S=4 M=8: bubble ")
    bubble = a.table["bubble_ratio"]
    assert f"{100 * bubble:.2f} %" in text
    assert f"on dgx-a100 (gpt3-1.3b)" in text
    assert seconds_in(text.split("simulated")[1]) == pytest.approx(
        a.simulation["runtime_s"], rel=1e-3)
    levels = {td.text for td in html_root(a._repr_html_()).iter("td")}
    assert {"formula", "table", "simulation"} <= levels


def test_comparison_repr_ranks_fastest_first():
    c = pipetab.compare(["1f1b", "gpipe", "zb-h1"], devices=4, microbatches=8, model=MODEL,
                        system=SYSTEM)
    text = repr(c)
    lines = text.splitlines()
    assert lines[0] == "<pipetab.Comparison" and "dgx-a100 (gpt3-1.3b)" in lines[1]
    rows = lines[2:]
    runtime = {e["schedule"]: e["simulation"]["runtime_s"] for e in c.comparisons[0]["schedules"]}
    assert [row.split()[0] for row in rows] == sorted(runtime, key=runtime.get)
    times = [seconds_in(row) for row in rows]
    assert times == sorted(times)
    root = html_root(c._repr_html_())
    assert len(root.findall(".//tbody/tr")) == 3


def test_tune_plan_validate_sweep_reprs(tmp_path, source_dir):
    t = pipetab.tune(4, 8, memory_limit="80GB", model=MODEL, system=SYSTEM)
    text = repr(t)
    assert "S=4 M=8 on dgx-a100 (gpt3-1.3b), limit 80 GB: best " + t.best["name"] in text
    assert len(html_root(t._repr_html_()).findall(".//tbody/tr")) == min(50, len(t.candidates))

    p = pipetab.plan(MODEL, "dgx-h100", gpus=8, global_batch=16, top=3)
    text = repr(p)
    assert text.startswith(f"<pipetab.PlanResult gpt3-1.3b on 8 × dgx-h100, global batch 16: best ")
    assert p.top[0]["description"] in text.splitlines()[0]
    assert len(text.splitlines()) == 1 + len(p.top)

    path = tmp_path / "bad.csv"
    pipetab.generate("1f1b", 2, 2).save(path)
    path.write_text(path.read_text().replace(",0B1\n", "\n"))  # a backward missing: invalid
    report = pipetab.validate(path)
    assert not report.valid
    assert repr(report).startswith(f"<pipetab.ValidationReport {path}: invalid, ")
    assert len(html_root(report._repr_html_()).findall(".//tbody/tr")) == len(report.issues)

    sweep = pipetab.sweep(source_dir / "experiments" / "fig3-bubble.toml", jobs=1)
    text = repr(sweep)
    assert text.startswith(f"<pipetab.SweepResult {len(sweep)} rows × {len(sweep.columns)} columns: ")
    assert sweep.columns[0] in text
    assert len(html_root(sweep._repr_html_()).findall(".//tbody/tr")) == min(50, len(sweep))


def test_html_escapes_names(tmp_path):
    path = tmp_path / "a<b&c.csv"
    pipetab.generate("1f1b", 2, 2).save(path)
    table = pipetab.load_table(path)
    root = html_root(table._repr_html_())  # would not parse unescaped
    assert str(path) in root.find(".//b").text


# ------------------------------------------------------------------------------------------------
# Traces and SVG from Python


def test_trace_and_svg_equal_the_commands(cli, tmp_path):
    s = pipetab.simulate("zb-v", 4, 8, model=MODEL, system=SYSTEM, trace=tmp_path / "py.json",
                         svg=tmp_path / "py.svg")
    done = cli.run("simulate", "zb-v", "-S", 4, "-M", 8, "--model", MODEL, "--system", SYSTEM,
                   "--trace", tmp_path / "cli.json", "--svg", tmp_path / "cli.svg")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert (tmp_path / "py.svg").read_bytes() == (tmp_path / "cli.svg").read_bytes()
    assert s.svg() == (tmp_path / "cli.svg").read_text()


def test_trace_has_every_op_and_memory_counters(tmp_path):
    s = pipetab.simulate("1f1b", 4, 8, model=MODEL, system=SYSTEM)
    trace = s.trace()
    events = trace["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("F", "B", "I", "W")]
    assert len(ops) == s.table.num_ops
    assert any(e.get("ph") == "C" for e in events)  # memory counters
    stats = s.write_trace(tmp_path / "run.json.gz")
    with gzip.open(tmp_path / "run.json.gz", "rt") as file:
        assert json.load(file) == trace
    assert stats["file_bytes"] == (tmp_path / "run.json.gz").stat().st_size
    assert stats["json_bytes"] > stats["file_bytes"] and stats["events"] == len(events)


def test_svg_timeline_parses_with_a_lane_per_device(tmp_path):
    s = pipetab.simulate("interleaved", 4, 8, chunks=2, model=MODEL, system=SYSTEM)
    root = ET.fromstring(s.svg(title="my <run>"))
    assert root.tag == f"{SVG}svg"
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "my <run>" in texts
    assert len(list(root.iter(f"{SVG}rect"))) >= s.table.num_ops
    s.write_svg(tmp_path / "t.svg")
    default_title = ET.parse(tmp_path / "t.svg").getroot()
    assert any((t.text or "").startswith("interleaved on dgx-a100 (gpt3-1.3b), S=4 M=8")
               for t in default_title.iter(f"{SVG}text"))
