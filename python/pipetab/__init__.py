"""pipetab: evaluate pipeline-parallel training schedules from Python.

The package calls the same C++ library as the ``pipetab`` command (the extension module
``pipetab._core``). Every result keeps the JSON object the command prints with ``--format json``
for the same request (``result.to_dict()``), and offers typed accessors: NumPy arrays for
per-device and per-op values, and ``to_pandas()`` where a table of rows is natural.

Errors in the input raise :class:`pipetab.Error` (a ``ValueError``) with the command's message;
:class:`ParamError` (impossible parameters) and :class:`ParseError` (a malformed file, with
``file``, ``line`` and ``column``) are its subclasses. Long calls (simulate, compare, sweep,
tune, plan) release the GIL, and Ctrl-C stops sweep, tune, plan and compare with
``KeyboardInterrupt``. See docs/python.md.
"""

from __future__ import annotations

import difflib
import html
import inspect
import json
import math
import os
import tomllib
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Optional, Sequence, TypedDict, Union, Unpack

import numpy as np

from . import _core
from ._core import Error, ParamError, ParseError

__version__: str = _core.__version__  # CMake's project version, as `pipetab --version`

for _error in (Error, ParamError, ParseError):
    _error.__module__ = __name__  # shown as pipetab.Error in tracebacks

__all__ = [
    "__version__",
    "Error",
    "ParamError",
    "ParseError",
    "FSDP",
    "RunOptions",
    "PlanOptions",
    "Table",
    "Analysis",
    "Simulation",
    "Comparison",
    "ValidationReport",
    "SweepResult",
    "TuneResult",
    "PlanResult",
    "list_schedules",
    "run_options",
    "model_presets",
    "system_presets",
    "preset",
    "generate",
    "load_table",
    "validate",
    "analyze",
    "simulate",
    "compare",
    "sweep",
    "tune",
    "plan",
]

# The schedules `pipetab compare` and `sensitivity` run by default (the paper's).
PAPER_SCHEDULES = ("gpipe", "1f1b", "interleaved", "chimera", "chimera-asym", "hanayo")


def _pandas():
    try:
        import pandas
    except ImportError as error:  # pragma: no cover - depends on the machine
        raise ImportError(
            "to_pandas() needs pandas: install python3-pandas (Debian) or pip install pandas"
        ) from error
    return pandas


def _arrays(section: Any) -> Any:
    """A copy of a JSON section with every list of numbers (per-device values) as a NumPy array."""
    if isinstance(section, dict):
        return {key: _arrays(value) for key, value in section.items()}
    if isinstance(section, list):
        if section and all(isinstance(v, bool) for v in section):
            return np.array(section, dtype=bool)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) or v is None for v in section):
            return np.array([math.nan if v is None else v for v in section], dtype=float)
        return [_arrays(v) for v in section]
    return section


PathLike = Union[str, "os.PathLike[str]"]
#: A model or system: a preset name, a TOML file's path, or a dict in the file's layout.
Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]
#: Table-level costs: a string such as ``"F=1,B=2"`` or a dict such as ``{"F": 1, "B": 2}``.
CostsLike = Union[None, str, Mapping[str, float]]


# ------------------------------------------------------------------------------------------------
# Representations: one line for repr(), a table for notebooks (_repr_html_)


def _seconds(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value != 0 and abs(value) < 1e-3:
        return f"{value * 1e6:.4g} µs"
    if abs(value) < 1:
        return f"{value * 1e3:.4g} ms"
    return f"{value:.4g} s"


def _bytes(value: Optional[float]) -> str:
    if value is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _interval(d: Mapping[str, Any]) -> str:
    """A simulation's error bar as text: "1.68 s to 2.91 s (90 %, from 34 published dense runs on
    3 presets)", or why it has none."""
    bar = d.get("runtime_interval_s")
    note = d.get("runtime_interval_note") or ""
    if not bar:
        return f"no error bar: {note}" if note else "no error bar"
    text = (f"{_seconds(bar['low'])} to {_seconds(bar['high'])} ({100 * bar['level']:.0f} %, from "
            f"{bar['runs']} published {bar['regime']} runs on {bar['basis']})")
    return f"{text}; {note}" if note else text


def _ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _html_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A small HTML table (escaped), as notebooks show results."""
    cells = lambda tag, row: "".join(f"<{tag}>{html.escape(str(v))}</{tag}>" for v in row)
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return (
        f"<div class=\"pipetab\"><b>{html.escape(title)}</b>"
        f"<table><thead><tr>{cells('th', header)}</tr></thead><tbody>{body}</tbody></table></div>"
    )


# ------------------------------------------------------------------------------------------------
# Inputs: TOML for model and system dicts, cost strings


def _toml_value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    raise TypeError(f"{where}: {type(value).__name__} cannot be written to TOML")


def _toml(document: Mapping[str, Any], what: str) -> str:
    """A TOML document with the dict's keys: scalars first, then one [table] per nested dict."""
    if not isinstance(document, Mapping):
        raise TypeError(f"{what}: expected a preset name, a file path or a dict")
    lines: list[str] = []

    def table(prefix: str, mapping: Mapping[str, Any]) -> None:
        nested = []
        for key, value in mapping.items():
            if not isinstance(key, str):
                raise TypeError(f"{what}: key {key!r} is not a string")
            name = json.dumps(key)
            if isinstance(value, Mapping):
                nested.append((f"{prefix}.{name}" if prefix else name, value))
            else:
                lines.append(f"{name} = {_toml_value(value, f'{what}: {key}')}")
        for path, value in nested:
            lines.append(f"[{path}]")
            table(path, value)

    table("", document)
    return "\n".join(lines) + "\n"


def _costs(costs: Union[None, str, Mapping[str, float]]) -> Optional[str]:
    if costs is None or isinstance(costs, str):
        return costs
    if isinstance(costs, Mapping):
        return ",".join(f"{key}={float(value)!r}" for key, value in costs.items())
    raise TypeError("costs: expected a string such as 'F=1,B=2' or a dict such as {'F': 1, 'B': 2}")


@dataclass(frozen=True)
class FSDP:
    """Options of fully sharded data parallelism (``fsdp=FSDP(...)``; ``fsdp=True`` takes the
    defaults), as the flags of ``pipetab simulate --fsdp``:

    - ``shard``: HSDP, shard over groups of this many ranks (``--fsdp-shard``); None: all
    - ``reshard_after_forward``: True, False, or None for torchtitan's default (on without
      pipelining, off with it)
    - ``grad_sync``: ``"step"`` (once after a unit's last backward, the gradients held
      unsharded until then), ``"microbatch"``, or ``"auto"``: torchtitan's (step with
      pipelining, microbatch without)
    - ``fp8_all_gather``: all-gather parameters in FP8 (one byte each)
    - ``impl``: ``"fsdp2"`` (PyTorch's: copies each gathered unit out of the all-gather's
      buffer and the gradients into the reduce-scatter's) or ``"megatron"`` (Megatron-FSDP:
      in place)
    """

    shard: Optional[int] = None
    reshard_after_forward: Optional[bool] = None
    grad_sync: str = "auto"
    fp8_all_gather: bool = False
    impl: str = "fsdp2"


# ------------------------------------------------------------------------------------------------
# The options of a run: sim/options.hpp defines each once (key, flag, type, range, choices); the
# command line registers a flag for each, and these functions take each as a keyword.


class PlanOptions(TypedDict, total=False):
    """The options of a run that :func:`plan` takes as keywords: every option it does not search
    (see :func:`run_options`; None leaves an option to the model, the job file or the default).
    """

    seq_len: int
    precision: Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
    fp8_recipe: Literal["tensorwise", "delayed", "rowwise", "blockwise", "mxfp8", "nvfp4"]
    fp8_params: bool
    fp8_attention: bool
    dtype_bytes: int
    moe_dispatcher: Literal["alltoall", "deepep", "hybridep"]
    moe_capacity_factor: float
    moe_imbalance: float
    moe_fp8_dispatch: bool
    moe_shared_expert_overlap: bool
    moe_recompute_norm: bool
    mla_recompute_up_proj: bool
    dense_mlp_recompute: bool
    grad_bytes_per_param: float
    optimizer_bytes_per_param: float
    offload_activations: float
    offload_layers: int
    offload_modules: str
    offload_streams: int
    tp_overlap: Literal["none", "backward", "all"]
    dp_overlap: bool
    dp_bucket_bytes: float
    dp_bucket_mb: float  # --dp-bucket-mb: dp_bucket_bytes in MB
    stack: Literal[
        "megatron-core", "megatron-lm", "torchtitan", "torchtitan-compile", "llm-foundry",
        "nemo-automodel"
    ]
    flash_attention: bool
    fused_elementwise: bool
    fused_loss: bool
    fp8_saved_inputs: bool
    fused_multihot: bool
    grad_accumulation_fusion: bool
    attention_kernel: Literal["auto", "flash2", "flash3", "cudnn", "triton"]
    autocast: bool
    cuda_graphs: bool
    cuda_graph_scope: str
    nccl_nvls: bool
    fsdp_shard: int
    reshard_after_forward: Union[bool, Literal["auto"]]
    fsdp_grad_sync: Literal["auto", "step", "microbatch"]
    fsdp_fp8_all_gather: bool
    fsdp_impl: Literal["fsdp2", "megatron", "fsdp1"]
    pipeline_layout: str
    balance_embedding: bool
    pipeline_parallel: int
    schedule: str
    runtime: Literal["auto", "async", "megatron", "pytorch", "dualpipe"]
    contention: bool
    blocking_send: bool
    overheads: bool
    optimizer: bool
    nccl_buffsize: float
    nccl_p2p_net_chunksize: float
    memory_reserve: float
    flop_count: Literal["palm", "causal"]
    collective_scale: float


class _TableRunOptions(PlanOptions, total=False):
    """The options of a run beside a table's sizes (``chunks`` is the table's own parameter)."""

    micro_batch: int
    global_batch: int
    recompute: Literal["none", "selective", "full", "selective-op", "every-other-layer", "lgd"]
    distributed_optimizer: bool
    a2a_overlap: bool
    tensor_parallel: int
    tp: int  # --tp: tensor_parallel
    sequence_parallel: bool
    context_parallel: int
    cp: int  # --cp: context_parallel
    cp_method: Literal["ring", "allgather", "a2a"]
    expert_parallel: int
    ep: int  # --ep: expert_parallel
    expert_tensor_parallel: int
    etp: int  # --etp: expert_tensor_parallel
    moe_recompute: Literal["none", "moe_act", "mlp"]
    data_parallel: int
    dp: int  # --dp: data_parallel
    fsdp: Union[bool, FSDP]  # True, False, or FSDP(...) with the fsdp_* options


class RunOptions(_TableRunOptions, total=False):
    """Every option of a run as a keyword of :func:`analyze`, :func:`simulate`, :func:`compare`
    and :func:`tune` (:func:`plan` takes :class:`PlanOptions`): each option's key, and the
    command's flag name where it differs (``tp`` for ``--tp``, ``dp_bucket_mb`` in MB for
    ``--dp-bucket-mb``). :func:`run_options` lists each with its flag, range, choices and help;
    python/tests/test_package.py checks that this list is exactly that one."""

    chunks: int


def run_options() -> list[dict]:
    """Every option of a run (sim/options.hpp), as the command's flags and these functions'
    keywords take it: ``key``; ``keywords``, every keyword that sets it (the key, and the flag's
    name where it differs); ``flag`` (None where no flag sets it); ``group`` (job, layout or
    simulation); ``type`` (integer, number, boolean, tristate, choice or text); ``help``;
    ``min`` and ``max`` (numbers; None otherwise); ``choices``; ``default`` (as text, '' where
    unset) and the flag's ``flag_scale`` and ``flag_unit`` (``--dp-bucket-mb`` counts MB)."""
    out = []
    for option in _core.run_options():
        option = dict(option)
        option["keywords"] = [k for k, (o, _) in _KEYWORDS.items() if o["key"] == option["key"]]
        out.append(option)
    return out


def _keywords() -> dict[str, tuple[dict, float]]:
    """Each keyword's option and the factor from the keyword's unit to the option's: every key,
    and the name of the option's flag where it differs (tp for --tp, dp_bucket_mb for
    --dp-bucket-mb in the flag's MB), as the command spells it. Negating flags (--no-overheads)
    are not keywords: the key takes False."""
    out: dict[str, tuple[dict, float]] = {}
    options = _core.run_options()
    for option in options:
        out[option["key"]] = (option, 1.0)
    for option in options:
        flag = option["flag"]
        if flag and option["flag_sets"]:
            name = flag[2:].replace("-", "_")
            out.setdefault(name, (option, option["flag_scale"]))
    return out


_KEYWORDS = _keywords()
_PLAN_SEARCHED = frozenset(_core.plan_searched())


def _option_text(keyword: str, option: dict, scale: float, value: Any) -> str:
    """A keyword's value as the option's text: bool as true/false, numbers as Python writes them
    (read back to the same double), strings as they are. A value of the wrong type raises
    TypeError; the library checks ranges and choices (pipetab.Error naming the keyword)."""
    kind = option["type"]
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    if kind == "integer" and number and isinstance(value, (int, np.integer)):
        return str(int(value))
    if kind == "number" and number:
        return repr(float(value) * scale)
    if kind in ("boolean", "tristate") and isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, str) and (kind in ("choice", "text") or
                                   (kind == "tristate" and value == "auto")):
        return value
    expected = {"integer": "an int", "number": "a number", "boolean": "True or False",
                "tristate": "True, False or 'auto'"}.get(kind, "a string")
    raise TypeError(f"{keyword}: expected {expected}, got {type(value).__name__}")


def _settings(function: str, options: Mapping[str, Any],
              refused: frozenset = frozenset()) -> list[tuple[str, str, str]]:
    """The keywords' settings (key, value as text, the keyword that gave it), in the order given;
    None leaves an option unset. An unknown keyword, one that `refused` holds the option of, or
    two keywords for one option raise TypeError."""
    out: list[tuple[str, str, str]] = []
    given: dict[str, str] = {}

    def add(key: str, value: str, keyword: str) -> None:
        if key in given:
            raise TypeError(f"{function}(): {given[key]} and {keyword} both set {key}")
        given[key] = keyword
        out.append((key, value, keyword))

    for keyword, value in options.items():
        entry = _KEYWORDS.get(keyword)
        if entry is None or entry[0]["key"] in refused:
            known = [k for k, (o, _) in _KEYWORDS.items() if o["key"] not in refused]
            if entry is not None:
                raise TypeError(f"{function}() got an unexpected keyword argument '{keyword}': "
                                f"{function} searches {entry[0]['key']} (see its own keywords)")
            near = difflib.get_close_matches(keyword, known, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else " (pipetab.run_options() lists them)"
            raise TypeError(f"{function}() got an unexpected keyword argument '{keyword}'{hint}")
        if value is None:
            continue
        option, scale = entry
        if keyword == "fsdp" and isinstance(value, FSDP):
            add("fsdp", "true", "fsdp")
            for field, key in (("shard", "fsdp_shard"),
                               ("reshard_after_forward", "reshard_after_forward"),
                               ("grad_sync", "fsdp_grad_sync"),
                               ("fp8_all_gather", "fsdp_fp8_all_gather"), ("impl", "fsdp_impl")):
                field_value = getattr(value, field)
                if field_value is not None:
                    name = f"fsdp.{field}"
                    add(key, _option_text(name, _KEYWORDS[key][0], 1.0, field_value), name)
            continue
        if keyword == "fsdp" and not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"fsdp={value!r}: expected True, False or pipetab.FSDP(...)")
        add(option["key"], _option_text(keyword, option, scale, value), keyword)
    return out


def _config(args: Any, config: Optional[Config], what: str) -> None:
    """A model or system: a dict as TOML text, a name or path as it is (None: the default)."""
    if isinstance(config, Mapping):
        setattr(args, f"{what}_text", _toml(config, what))
    elif config is not None:
        setattr(args, what, os.fspath(config))


def _sim_args(
    function: str,
    options: Mapping[str, Any],
    *,
    system: Config = "balanced",
    model: Optional[Config] = None,
    costs: CostsLike = None,
    input_grad_frees: float = 0.0,
    job: Optional[PathLike] = None,
    gpus: Optional[int] = None,
) -> _core.SimArgs:
    args = _core.SimArgs()
    if system is None:
        raise TypeError("system: expected a preset name, a file path or a dict")
    _config(args, system, "system")
    _config(args, model, "model")  # None: the command's default model preset
    args.settings = _settings(function, options)
    args.job = None if job is None else os.fspath(job)
    args.gpus = _optional_int(gpus, "gpus")
    args.costs = _costs(costs)
    args.input_grad_frees = input_grad_frees
    return args


# ------------------------------------------------------------------------------------------------
# Tables


class Table:
    """A schedule table: a generated schedule, a table file, or a table found by tune or plan."""

    def __init__(self, core: _core.Table):
        self._core = core
        self._ops: Optional[dict] = None

    name = property(lambda self: self._core.name, doc="schedule name, or the file's path")
    devices = property(lambda self: self._core.devices)
    stages = property(lambda self: self._core.stages, doc="stages per pipeline")
    microbatches = property(lambda self: self._core.microbatches)
    pipelines = property(lambda self: self._core.pipelines)
    num_ops = property(lambda self: self._core.num_ops)
    path = property(lambda self: self._core.path, doc="the file it was read from, or None")
    has_comms = property(lambda self: self._core.has_comms, doc="holds a communication order")

    @property
    def params(self) -> Optional[dict]:
        """The schedule's resolved parameters (as in the JSON reports), or None for a user table."""
        text = self._core.params_json
        return None if text is None else json.loads(text)

    def __len__(self) -> int:
        return self.num_ops

    def __repr__(self) -> str:
        return (
            f"<pipetab.Table {self.name!r}: {self.devices} devices, {self.stages} stages, "
            f"{self.microbatches} microbatches, {self.num_ops} ops>"
        )

    def _repr_html_(self) -> str:
        rows = [("devices", self.devices), ("stages", self.stages),
                ("microbatches", self.microbatches), ("pipelines", self.pipelines),
                ("ops", self.num_ops), ("file", self.path or "-"),
                ("params", json.dumps(self.params) if self.params is not None else "-")]
        return _html_table(f"pipetab.Table {self.name}", ["", ""], rows)

    def same_schedule(self, other: "Table") -> bool:
        """Same sizes, placement and per-device orders."""
        return self._core.same_schedule(other._core)

    def ops(self) -> dict:
        """Per op, in table order (device by device): NumPy arrays ``device``, ``position``,
        ``kind`` ('F', 'B', 'I', 'W'), ``microbatch``, ``stage``, for an overlapped pair
        ``pair_kind``/``pair_microbatch``/``pair_stage`` ('' and -1 otherwise), and ``action``
        (PyTorch's action text, e.g. '0F1')."""
        if self._ops is None:
            self._ops = dict(self._core.ops())
        return {key: value.copy() for key, value in self._ops.items()}

    def timing(self, costs: Union[None, str, Mapping[str, float]] = None) -> dict:
        """The table level's idealized timing: ``start`` and ``end`` of every op (NumPy)."""
        start, end = self._core.timing(_costs(costs))
        return {"start": start, "end": end}

    def to_pandas(self, costs: Union[None, str, Mapping[str, float]] = None):
        """One row per op with its idealized start and end."""
        frame = _pandas().DataFrame(self.ops())
        timing = self.timing(costs)
        frame["start"] = timing["start"]
        frame["end"] = timing["end"]
        return frame

    def export(self, format: str = "json", force: bool = False) -> str:
        """The table as ``pipetab show --format FORMAT`` writes it: csv, pytorch, pytorch-comms or
        json. Refuses (Error) what PyTorch cannot run as written unless ``force``."""
        return self._core.export(format, force)

    def save(self, path: Union[str, os.PathLike], format: Optional[str] = None, force: bool = False) -> None:
        """Writes the table; the format defaults to json for a .json path and csv otherwise."""
        path = os.fspath(path)
        if format is None:
            format = "json" if path.endswith(".json") else "csv"
        text = self.export(format, force)
        with open(path, "w", encoding="utf-8", newline="") as file:
            file.write(text)


def _optional_int(value: Any, name: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return int(value)


def _int(value: Any, name: str) -> int:
    result = _optional_int(value, name)
    if result is None:
        raise TypeError(f"{name}: expected an int, got None")
    return result


# The command's default sizes (src/cli/options.hpp kDefaultDevices, kDefaultMicrobatches).
DEFAULT_DEVICES = 8
DEFAULT_MICROBATCHES = 8


class _Default(int):
    """A size's default that compare and tune show as 8: the value, and that the caller left it,
    so that a job file's size replaces it (``devices is _LEFT_DEVICES``)."""


_LEFT_DEVICES = _Default(DEFAULT_DEVICES)
_LEFT_MICROBATCHES = _Default(DEFAULT_MICROBATCHES)


def _given_size(value: Any, left: _Default, name: str) -> Optional[int]:
    return None if value is left else _int(value, name)


def generate(
    name: str,
    devices: int = DEFAULT_DEVICES,
    microbatches: int = DEFAULT_MICROBATCHES,
    *,
    chunks: Optional[int] = None,
    waves: Optional[int] = None,
    group_size: Optional[int] = None,
    variant: Optional[str] = None,
    split: Optional[str] = None,
) -> Table:
    """The table of a registered schedule (see :func:`list_schedules`), as ``pipetab show NAME
    -S devices -M microbatches [-v chunks] [-W waves] [--group-size G] [--variant V] [--split E:L]``
    builds it. Raises ParamError for parameters the schedule cannot take."""
    return Table(
        _core.generate(
            name,
            _int(devices, "devices"),
            _int(microbatches, "microbatches"),
            _optional_int(chunks, "chunks"),
            _optional_int(waves, "waves"),
            _optional_int(group_size, "group_size"),
            variant,
            split,
        )
    )


def load_table(path: Union[str, os.PathLike], validate: bool = True) -> Table:
    """Reads a table file (PyTorch CSV or pipetab JSON). With ``validate`` (the default, as the
    command's ``--table``) an invalid table raises Error naming the first issue's file, line and
    column."""
    return Table(_core.load_table(os.fspath(path), bool(validate)))


class _Result:
    """A result: the command's JSON object and accessors."""

    def __init__(self, data: dict):
        self._data = data

    def to_dict(self) -> dict:
        """The object ``pipetab ... --format json`` prints for the same request."""
        return json.loads(json.dumps(self._data))

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self._data, indent=indent)

    def _summary(self) -> str:
        return ""

    def __repr__(self) -> str:
        summary = self._summary()
        return f"<pipetab.{type(self).__name__}{' ' + summary if summary else ''}>"

    def _html_rows(self) -> tuple[Sequence[str], list[Sequence[Any]]]:
        return ["key", "value"], [(k, v) for k, v in self._data.items() if not isinstance(v, (dict, list))]

    def _repr_html_(self) -> str:
        header, rows = self._html_rows()
        return _html_table(f"pipetab.{type(self).__name__} {self._summary()}".strip(), header, rows)


class ValidationReport(_Result):
    """``pipetab validate FILE --format json``."""

    valid = property(lambda self: self._data["valid"])
    issues = property(lambda self: list(self._data["issues"]))
    issue_count = property(lambda self: self._data["issue_count"])

    def __bool__(self) -> bool:
        return self.valid

    def _summary(self) -> str:
        n = self.issue_count
        return f"{self._data.get('file', '')}: " + (
            "valid" if self.valid else f"invalid, {n} issue{'' if n == 1 else 's'}"
        )

    def _html_rows(self):
        columns = ["location", "device", "position", "op", "message"]
        return columns, [[issue.get(c, "") for c in columns] for issue in self._data["issues"]]

    def to_pandas(self):
        return _pandas().DataFrame(
            self._data["issues"], columns=["location", "device", "position", "op", "message"]
        )


def validate(path: Union[str, os.PathLike], max_issues: int = 50, check: bool = False) -> ValidationReport:
    """Checks a table file. A file that cannot be read or parsed raises (ParseError with its
    line and column); an invalid table is reported (``report.valid``, ``report.issues``), and
    with ``check`` raises Error with the command's message."""
    path = os.fspath(path)
    if _int(max_issues, "max_issues") < 0:
        raise ValueError("max_issues must be >= 0")
    report = ValidationReport(json.loads(_core.validate_file(path, max_issues)))
    if check and not report.valid:
        total = report.issue_count
        raise Error(f"{path}: invalid table ({total} issue{'' if total == 1 else 's'})")
    return report


# ------------------------------------------------------------------------------------------------
# Evaluation

_SIMULATION_KEYWORDS = """

Every option of a run is a keyword, the same for every command (:func:`run_options` lists each
with its flag, type, range, choices and help; :class:`RunOptions` types them): its key, such as
``seq_len=8192``, ``recompute="full"``, ``precision="fp8"``, ``tensor_parallel=8`` or
``moe_dispatcher="deepep"``, or its flag's name where that differs: ``tp``, ``cp``, ``dp``,
``ep``, ``etp`` and ``dp_bucket_mb`` (in MB). ``fsdp`` takes True, False or :class:`FSDP`; a
negating flag is its key's False (``overheads``, ``contention`` and ``optimizer`` False are
``--no-overheads``, ``--no-contention`` and ``--no-optimizer``). None leaves an option to the job
file, the model file or the default; an unknown keyword raises TypeError. The other inputs:

- ``system``: a system preset name, a TOML file's path, or a dict (default ``"balanced"``)
- ``model``: a model preset name, a TOML file's path, or a dict; None is the command's default
- ``costs``: table-level costs, ``"F=1,B=2"`` or ``{"F": 1, "B": 2}`` (seconds when simulating)
- ``input_grad_frees``: the fraction of a stage's activations its input-gradient pass frees
- ``job``: a torchtitan job TOML or Megatron-LM arguments (``--job``, docs/jobs.md): its options
  apply under the keywords, and its schedule, pipeline depth, chunks and global batch give the
  table's where the call leaves them (a ``global_batch`` keyword gives the microbatches too)
- ``gpus``: the GPU count (``--gpus``): for a job file that leaves it implicit, and the
  data-parallel replicas (GPUs / (PP × TP × CP)) where no option gives them
"""


def _subject(subject: Union[str, os.PathLike, Table, None], shape: dict,
             args: Optional[_core.SimArgs] = None) -> Table:
    """The table to evaluate: a Table, a table file, or a schedule generated at the sizes given,
    those a job file or the options give (``args``) where they are not, and the defaults."""
    if isinstance(subject, Table):
        given = [key for key, value in shape.items() if value is not None]
        if given:
            raise Error(
                f"{subject.name}: the table sets the sizes; {', '.join(given)} do not apply to it"
            )
        return subject
    if isinstance(subject, os.PathLike):
        return _subject(load_table(subject), shape)
    if subject is not None and not isinstance(subject, str):
        raise TypeError(
            f"expected a schedule name, a Table or a pathlib.Path, got {type(subject).__name__}"
        )
    values = dict(shape)
    if args is not None:
        schedule, values["devices"], values["microbatches"], values["chunks"] = _core.run_shape(
            args, _optional_int(shape["devices"], "devices"),
            _optional_int(shape["microbatches"], "microbatches"),
            _optional_int(shape["chunks"], "chunks"), DEFAULT_DEVICES)
        if subject is None:
            subject = schedule
    if subject is None:
        raise Error("give a schedule name (see pipetab.list_schedules()), a Table or a "
                    "pathlib.Path, or job= a file that names its pipeline schedule")
    values = {key: value for key, value in values.items() if value is not None}
    values.setdefault("devices", DEFAULT_DEVICES)
    values.setdefault("microbatches", DEFAULT_MICROBATCHES)
    return generate(subject, **values)


class Analysis(_Result):
    """One schedule at the formula, table and simulation levels (``pipetab analyze --format
    json``). Sections are dicts; per-device values in ``table`` and ``simulation`` are NumPy
    arrays."""

    schedule = property(lambda self: self._data["schedule"])
    params = property(lambda self: dict(self._data["params"]))
    costs = property(lambda self: dict(self._data["costs"]))
    formula = property(lambda self: _arrays(self._data["formula"]))
    table = property(lambda self: _arrays(self._data["table"]))
    simulation = property(lambda self: _arrays(self._data["simulation"]))

    def _summary(self) -> str:
        p, table = self._data["params"], self._data["table"]
        formula, simulation = self._data.get("formula") or {}, self._data.get("simulation")
        text = (
            f"{self.schedule} S={p['devices']} M={p['microbatches']}: bubble "
            f"{_ratio(table['bubble_ratio'])} (formula {_ratio(formula.get('bubble_ratio'))}), "
            f"makespan {table['makespan']:.4g}"
        )
        if simulation:
            text += (
                f", simulated {_seconds(simulation['runtime_s'])} on {simulation['system']} "
                f"({simulation['model']})"
            )
        return text

    def _html_rows(self):
        formula, table = self._data.get("formula") or {}, self._data["table"]
        simulation = self._data.get("simulation") or {}
        rows = [
            ("formula", "bubble ratio", _ratio(formula.get("bubble_ratio"))),
            ("formula", "peak activation (M_a)", formula.get("peak_activation", "-")),
            ("table", "makespan", f"{table['makespan']:.6g}"),
            ("table", "bubble ratio", _ratio(table["bubble_ratio"])),
            ("table", "peak activation (M_a)", table["peak_activation_max"]),
        ]
        if simulation:
            rows += [
                ("simulation", "runtime", _seconds(simulation["runtime_s"])),
                ("simulation", "idle ratio", _ratio(simulation["idle_ratio"])),
                ("simulation", "peak memory per device", _bytes(simulation["peak_memory_max_bytes"])),
                ("simulation", "system (model)", f"{simulation['system']} ({simulation['model']})"),
            ]
        return ["level", "quantity", "value"], rows


def analyze(
    subject: Union[str, "os.PathLike[str]", Table, None] = None,
    devices: Optional[int] = None,
    microbatches: Optional[int] = None,
    *,
    chunks: Optional[int] = None,
    waves: Optional[int] = None,
    group_size: Optional[int] = None,
    variant: Optional[str] = None,
    split: Optional[str] = None,
    memory_curves: bool = False,
    system: Config = "balanced",
    model: Optional[Config] = None,
    costs: CostsLike = None,
    input_grad_frees: float = 0.0,
    job: Optional[PathLike] = None,
    gpus: Optional[int] = None,
    **options: Unpack[_TableRunOptions],
) -> Analysis:
    """``pipetab analyze``: one schedule at the formula, table and simulation levels.

    ``subject`` is a schedule name (generated at ``devices`` × ``microbatches``, default 8 × 8,
    with ``chunks``, ``waves``, ``group_size``, ``variant``, ``split`` as ``pipetab show``), a
    :class:`Table`, or a ``pathlib.Path`` of a table file; None with ``job`` is the job file's
    schedule. ``memory_curves`` adds each device's activation curve to ``result.table``."""
    args = _sim_args("analyze", options, system=system, model=model, costs=costs,
                     input_grad_frees=input_grad_frees, job=job, gpus=gpus)
    table = _subject(subject, dict(devices=devices, microbatches=microbatches, chunks=chunks,
                                   waves=waves, group_size=group_size, variant=variant, split=split),
                     args)
    return Analysis(json.loads(_core.analyze(table._core, args, bool(memory_curves))))


analyze.__doc__ += _SIMULATION_KEYWORDS


class Simulation(_Result):
    """``pipetab simulate --format json``, with the simulated ``op_start``/``op_end`` of every
    table op (NumPy, in the table's op order), the table itself, and the run's pictures: a Chrome
    trace (:meth:`write_trace`, :meth:`trace`) and an SVG timeline (:meth:`svg`,
    :meth:`write_svg`), as ``simulate --trace`` and ``--svg`` write them."""

    # A notebook shows the timeline inline up to this many ops (the SVG grows with them).
    HTML_TIMELINE_MAX_OPS = 4000

    def __init__(self, run: _core.SimulationRun, table: Table):
        super().__init__(json.loads(run.json))
        self._run = run
        self.table = table
        self.op_start: np.ndarray = run.op_start
        self.op_end: np.ndarray = run.op_end

    runtime_s = property(lambda self: self._data["runtime_s"], doc="the iteration, seconds")
    links = property(lambda self: list(self._data["links"]))
    critical_path = property(lambda self: list(self._data["critical_path"]))

    @property
    def metrics(self) -> dict:
        """The report's values; per-device ones as NumPy arrays."""
        return _arrays(self._data)

    def per_device(self) -> dict:
        """Every per-device value (compute_s, idle_s, peak_memory_bytes, ...) as NumPy arrays."""
        return {key: value for key, value in self.metrics.items() if isinstance(value, np.ndarray)}

    def to_pandas(self):
        """One row per table op: the op and its simulated start and end (seconds)."""
        frame = _pandas().DataFrame(self.table.ops())
        frame["start"] = self.op_start
        frame["end"] = self.op_end
        return frame

    def trace(self) -> dict:
        """The Chrome Trace Event object (``traceEvents``) that :meth:`write_trace` writes."""
        return json.loads(self._run.trace())

    def write_trace(self, path: PathLike) -> dict:
        """Writes the Chrome trace as ``pipetab simulate --trace PATH`` does (gzip-compressed when
        the path ends in .gz; open it in ui.perfetto.dev or chrome://tracing). Returns
        ``events``, ``json_bytes`` and ``file_bytes``; a trace too large for chrome://tracing
        draws a warning."""
        events, json_bytes, file_bytes = self._run.write_trace(os.fspath(path))
        return {"events": events, "json_bytes": json_bytes, "file_bytes": file_bytes}

    def svg(self, title: Optional[str] = None) -> str:
        """The SVG timeline ``pipetab simulate --svg`` writes: a lane per device, transfers,
        collectives and a time axis. ``title`` defaults to the command's ("NAME on SYSTEM (MODEL),
        S=.. M=.."). Raises Error past the command's limit on ops."""
        return self._run.svg(title)

    def write_svg(self, path: PathLike, title: Optional[str] = None) -> None:
        """Writes :meth:`svg` to ``path``."""
        text = self.svg(title)
        with open(os.fspath(path), "w", encoding="utf-8", newline="") as file:
            file.write(text)

    def _summary(self) -> str:
        d = self._data
        text = (
            f"{self.table.name} S={self.table.devices} M={self.table.microbatches} on "
            f"{d['system']} ({d['model']}): {_seconds(d['runtime_s'])}, idle {_ratio(d['idle_ratio'])}, "
            f"peak {_bytes(d['peak_memory_max_bytes'])} per device"
        )
        if any(d.get("over_capacity") or ()):
            text += f" (over the {_bytes(d['memory_capacity_bytes'])} of a device)"
        text += f"; {_interval(d)}" if d.get("runtime_interval_s") or d.get("runtime_interval_note") else ""
        return text

    def _html_rows(self):
        d = self._data
        breakdown = d.get("breakdown") or {}
        rows = [
            ("runtime", _seconds(d["runtime_s"])),
            ("error bar", _interval(d)),
            ("pipeline end", _seconds(d["pipeline_end_s"])),
            ("tokens per second", "-" if d.get("tokens_per_s") is None else f"{d['tokens_per_s']:.4g}"),
            ("MFU", _ratio(d.get("mfu")) + (f" ({d['flop_count']} count)" if d.get("mfu") else "")),
            ("HFU (FLOPs executed)", _ratio(d.get("hfu"))),
            ("stack", d.get("stack_description") or "-"),
            ("idle ratio", _ratio(d["idle_ratio"])),
            ("peak memory per device", _bytes(d["peak_memory_max_bytes"])),
            ("device memory", _bytes(d["memory_capacity_bytes"])),
            ("runtime model", d["runtime"]),
        ]
        rows += [(f"breakdown: {key}", _seconds(value)) for key, value in breakdown.items()
                 if isinstance(value, (int, float))]
        return ["quantity", "value"], rows

    def _repr_html_(self) -> str:
        text = super()._repr_html_()
        if self.table.num_ops <= self.HTML_TIMELINE_MAX_OPS:
            text += f"<div>{self.svg()}</div>"
        return text


def simulate(
    subject: Union[str, "os.PathLike[str]", Table, None] = None,
    devices: Optional[int] = None,
    microbatches: Optional[int] = None,
    *,
    chunks: Optional[int] = None,
    waves: Optional[int] = None,
    group_size: Optional[int] = None,
    variant: Optional[str] = None,
    split: Optional[str] = None,
    system: Config = "balanced",
    model: Optional[Config] = None,
    costs: CostsLike = None,
    input_grad_frees: float = 0.0,
    job: Optional[PathLike] = None,
    gpus: Optional[int] = None,
    trace: Optional[PathLike] = None,
    svg: Optional[PathLike] = None,
    **options: Unpack[_TableRunOptions],
) -> Simulation:
    """``pipetab simulate``: the subject (a schedule name, a :class:`Table` or a
    ``pathlib.Path``) and sizes as :func:`analyze`. ``trace`` and ``svg`` write the run's Chrome
    trace and SVG timeline as ``--trace`` and ``--svg`` do (also later: ``result.write_trace``,
    ``result.write_svg``)."""
    args = _sim_args("simulate", options, system=system, model=model, costs=costs,
                     input_grad_frees=input_grad_frees, job=job, gpus=gpus)
    table = _subject(subject, dict(devices=devices, microbatches=microbatches, chunks=chunks,
                                   waves=waves, group_size=group_size, variant=variant, split=split),
                     args)
    result = Simulation(_core.simulate(table._core, args), table)
    if trace is not None:
        result.write_trace(trace)
    if svg is not None:
        result.write_svg(svg)
    return result


simulate.__doc__ += _SIMULATION_KEYWORDS


class Comparison(_Result):
    """``pipetab compare --format json``: one comparison per system."""

    comparisons = property(lambda self: self._data["comparisons"])

    def _ranked(self, comparison: dict) -> list[dict]:
        def key(entry):
            rank = entry["rank"]
            return (rank["simulation"] is None, rank["simulation"] or 0, rank["table"])
        return sorted(comparison["schedules"], key=key)

    def _summary(self) -> str:
        parts = []
        for comparison in self._data["comparisons"]:
            ranked = ", ".join(
                f"{entry['schedule']} "
                + _seconds((entry.get("simulation") or {}).get("runtime_s"))
                for entry in self._ranked(comparison)
            )
            parts.append(f"{comparison['system']} ({comparison['model']}): {ranked}")
        return "; ".join(parts)

    def __repr__(self) -> str:
        lines = ["<pipetab.Comparison"]
        for comparison in self._data["comparisons"]:
            lines.append(f"  {comparison['system']} ({comparison['model']}), fastest first:")
            for entry in self._ranked(comparison):
                simulation = entry.get("simulation") or {}
                over = " !" if any(simulation.get("over_capacity") or ()) else ""
                lines.append(
                    f"    {entry['schedule']:<16} {_seconds(simulation.get('runtime_s')):>10}  "
                    f"bubble {_ratio(entry['table']['bubble_ratio']):>8}  peak "
                    f"{_bytes(simulation.get('peak_memory_max_bytes'))}{over}"
                )
        return "\n".join(lines) + ">"

    def _html_rows(self):
        rows = []
        for comparison in self._data["comparisons"]:
            for entry in self._ranked(comparison):
                simulation = entry.get("simulation") or {}
                rows.append((comparison["system"], comparison["model"], entry["schedule"],
                             _seconds(simulation.get("runtime_s")),
                             _ratio(entry["table"]["bubble_ratio"]),
                             _bytes(simulation.get("peak_memory_max_bytes")),
                             entry["rank"]["simulation"], entry["rank"]["table"]))
        return ["system", "model", "schedule", "runtime", "table bubble", "peak memory",
                "rank (simulation)", "rank (table)"], rows

    def _repr_html_(self) -> str:
        header, rows = self._html_rows()
        return _html_table("pipetab.Comparison", header, rows)

    def to_pandas(self):
        """One row per system and schedule: its parameters, the levels' headline numbers and its
        ranks."""
        rows = []
        for comparison in self._data["comparisons"]:
            for entry in comparison["schedules"]:
                simulation = entry.get("simulation") or {}
                formula = entry.get("formula") or {}
                row = {
                    "system": comparison["system"],
                    "model": comparison["model"],
                    "schedule": entry["schedule"],
                    "formula.bubble_ratio": formula.get("bubble_ratio"),
                    "table.makespan": entry["table"]["makespan"],
                    "table.bubble_ratio": entry["table"]["bubble_ratio"],
                    "table.peak_activation_max": max(entry["table"]["peak_activation"], default=None),
                    "simulation.runtime_s": simulation.get("runtime_s"),
                    "simulation.idle_ratio": simulation.get("idle_ratio"),
                    "simulation.tokens_per_s": simulation.get("tokens_per_s"),
                    "simulation.mfu": simulation.get("mfu"),
                    "simulation.flop_count": simulation.get("flop_count"),
                    "simulation.stack": simulation.get("stack"),
                    "simulation.peak_memory_max_bytes": simulation.get("peak_memory_max_bytes"),
                    "simulation.memory_capacity_bytes": simulation.get("memory_capacity_bytes"),
                    "simulation.fits": (None if "over_capacity" not in simulation
                                        else not any(simulation["over_capacity"])),
                }
                row.update({f"params.{k}": v for k, v in entry["params"].items()})
                row.update({f"rank.{k}": v for k, v in entry["rank"].items()})
                rows.append(row)
        return _pandas().DataFrame(rows)


def compare(
    names: Optional[Sequence[str]] = None,
    tables: Iterable[Table] = (),
    devices: int = _LEFT_DEVICES,
    microbatches: int = _LEFT_MICROBATCHES,
    *,
    chunks: Optional[int] = None,
    waves: Optional[int] = None,
    group_size: Optional[int] = None,
    variant: Optional[str] = None,
    split: Optional[str] = None,
    system: Optional[Config] = None,
    model: Optional[Config] = None,
    costs: CostsLike = None,
    input_grad_frees: float = 0.0,
    job: Optional[PathLike] = None,
    gpus: Optional[int] = None,
    **options: Unpack[_TableRunOptions],
) -> Comparison:
    """``pipetab compare``: schedules at the same S and M ranked per level, on ``system`` or on
    the paper's three systems (compute-bound, balanced, network-bound) when it is None. Options a
    schedule does not take are applied only to those that take them."""
    if isinstance(names, str):
        names = [names]
    tables = list(tables)
    for table in tables:
        if not isinstance(table, Table):
            raise TypeError(f"tables: expected pipetab.Table, got {type(table).__name__}")
    if names is None:
        names = [] if tables else list(PAPER_SCHEDULES)
    args = _sim_args("compare", options, system=system if system is not None else "balanced",
                     model=model, costs=costs, input_grad_frees=input_grad_frees, job=job,
                     gpus=gpus)
    # The sizes left at their defaults are a job file's where it gives them.
    _, shape_devices, shape_microbatches, chunks = _core.run_shape(
        args, _given_size(devices, _LEFT_DEVICES, "devices"),
        _given_size(microbatches, _LEFT_MICROBATCHES, "microbatches"),
        _optional_int(chunks, "chunks"), DEFAULT_DEVICES)
    text = _core.compare(
        list(names),
        [table._core for table in tables],
        DEFAULT_DEVICES if shape_devices is None else shape_devices,
        DEFAULT_MICROBATCHES if shape_microbatches is None else shape_microbatches,
        chunks,
        _optional_int(waves, "waves"),
        _optional_int(group_size, "group_size"),
        variant,
        split,
        args,
        system is not None,
    )
    return Comparison(json.loads(text))


compare.__doc__ += _SIMULATION_KEYWORDS


# ------------------------------------------------------------------------------------------------
# Studies


class SweepResult:
    """The rows of ``pipetab sweep``: ``columns``, ``rows`` (lists of Python values in column
    order), ``to_csv()`` / ``to_jsonl()`` (the command's output, byte for byte) and
    ``to_pandas()``."""

    def __init__(self, core: _core.SweepResult):
        self._core = core
        self.columns: list[str] = list(core.columns)
        self.rows: list[list[Any]] = json.loads(core.rows_json())

    def __len__(self) -> int:
        return len(self.rows)

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]

    def to_csv(self, header: bool = True) -> str:
        return self._core.csv(header)

    def to_jsonl(self) -> str:
        return self._core.jsonl()

    def to_pandas(self):
        return _pandas().DataFrame(self.rows, columns=self.columns)

    def __repr__(self) -> str:
        columns = ", ".join(self.columns[:8]) + (", ..." if len(self.columns) > 8 else "")
        n = len(self.rows)
        return f"<pipetab.SweepResult {n} row{'' if n == 1 else 's'} × {len(self.columns)} columns: {columns}>"

    # A notebook shows this many rows (to_pandas() has them all).
    HTML_MAX_ROWS = 50

    def _repr_html_(self) -> str:
        shown = [["" if v is None else v for v in row] for row in self.rows[: self.HTML_MAX_ROWS]]
        more = len(self.rows) - len(shown)
        title = f"pipetab.SweepResult: {len(self.rows)} rows" + (f" (first {len(shown)})" if more > 0 else "")
        return _html_table(title, self.columns, shown)


def sweep(
    study: Union[str, os.PathLike],
    jobs: Optional[int] = None,
    shard: Optional[tuple[int, int]] = None,
    output: Union[None, str, os.PathLike] = None,
    format: Optional[str] = None,
) -> SweepResult:
    """``pipetab sweep STUDY``: every configuration of a study file, on ``jobs`` threads (default:
    all cores), rows in the study's order. ``shard=(k, n)`` runs slice k of n. With ``output``
    the rows are also written as the command writes them (CSV, or JSON Lines for .jsonl or
    ``format='jsonl'``). Ctrl-C stops it (KeyboardInterrupt) after the running rows."""
    k, n = (1, 1) if shard is None else shard
    result = SweepResult(
        _core.sweep(os.fspath(study), _int(jobs or 0, "jobs"), _int(k, "shard"), _int(n, "shard"))
    )
    if output is not None:
        output = os.fspath(output)
        if format is None:
            format = "jsonl" if output.endswith((".jsonl", ".ndjson")) else "csv"
        if format not in ("csv", "jsonl"):
            raise Error(f"format '{format}': expected csv or jsonl")
        text = result.to_jsonl() if format == "jsonl" else result.to_csv(header=k == 1)
        with open(output, "w", encoding="utf-8", newline="") as file:
            file.write(text)
    return result


class TuneResult(_Result):
    """``pipetab tune --format json``, with every candidate's table."""

    def __init__(self, data: dict, tables: list):
        super().__init__(data)
        self._tables = tables

    best = property(lambda self: self._data["best"])
    best_builtin = property(lambda self: self._data["best_builtin"])
    candidates = property(lambda self: list(self._data["candidates"]))

    def table(self, index: int) -> Table:
        """The table of candidate ``index`` (in ranking order)."""
        return Table(self._tables[index])

    def best_table(self) -> Optional[Table]:
        """The best fitting candidate's table (what ``tune -t FILE`` writes), or None."""
        return self.table(0) if self._data["best"] is not None else None

    def to_pandas(self):
        return _pandas().DataFrame(self._data["candidates"])

    def _summary(self) -> str:
        d = self._data
        limit = d["memory_limit"]
        limit_text = (f"{limit['value']:g} M_a" if limit["unit"] == "M_a" else _bytes(limit["value"]))
        head = f"S={d['devices']} M={d['microbatches']} on {d['system']} ({d['model']}), limit {limit_text}: "
        best = d["best"]
        if best is None:
            return head + f"nothing fits ({len(d['candidates'])} candidates)"
        text = head + f"best {best['name']} {_seconds(best['runtime_s'])}"
        builtin = d.get("best_builtin")
        if builtin is not None and builtin["name"] != best["name"]:
            text += f" (best built-in {builtin['name']} {_seconds(builtin['runtime_s'])})"
        return text + f", {len(d['candidates'])} candidates"

    def _html_rows(self):
        rows = [(i + 1, c["name"], c["builtin"], c["fits"], _seconds(c["runtime_s"]),
                 c["peak_activation"], _bytes(c["peak_memory_bytes"]))
                for i, c in enumerate(self._data["candidates"][:50])]
        return ["rank", "candidate", "built-in", "fits", "runtime", "peak activation (M_a)",
                "peak memory"], rows


def tune(
    devices: int = _LEFT_DEVICES,
    microbatches: int = _LEFT_MICROBATCHES,
    memory_limit: Union[None, str, float] = None,
    *,
    builtins: bool = True,
    runnable_by: Optional[str] = None,
    system: Config = "balanced",
    model: Optional[Config] = None,
    costs: CostsLike = None,
    input_grad_frees: float = 0.0,
    job: Optional[PathLike] = None,
    gpus: Optional[int] = None,
    **options: Unpack[RunOptions],
) -> TuneResult:
    """``pipetab tune``: the fastest table under a per-device memory limit ('6', '6Ma' or a number
    for activations in M_a, '80GB' for total bytes; default S M_a), by simulation. Keywords of
    :func:`analyze` for the simulation; a job file's pipeline depth and global batch give
    ``devices`` and ``microbatches`` where they are left at their defaults. Unlike the command it
    does not raise when nothing fits: ``result.best`` is None."""
    if isinstance(memory_limit, (int, float)) and not isinstance(memory_limit, bool):
        memory_limit = repr(float(memory_limit))
    args = _sim_args("tune", options, system=system, model=model, costs=costs,
                     input_grad_frees=input_grad_frees, job=job, gpus=gpus)
    _, shape_devices, shape_microbatches, _ = _core.run_shape(
        args, _given_size(devices, _LEFT_DEVICES, "devices"),
        _given_size(microbatches, _LEFT_MICROBATCHES, "microbatches"), None, DEFAULT_DEVICES)
    text, tables = _core.tune(
        DEFAULT_DEVICES if shape_devices is None else shape_devices,
        DEFAULT_MICROBATCHES if shape_microbatches is None else shape_microbatches,
        memory_limit,
        bool(builtins),
        runnable_by,
        args,
    )
    return TuneResult(json.loads(text), list(tables))


tune.__doc__ += _SIMULATION_KEYWORDS


class PlanResult(_Result):
    """``pipetab plan --format json``, with the ranked layouts' tables."""

    def __init__(self, core: _core.PlanOutcome):
        super().__init__(json.loads(core.json))
        self._core = core

    top = property(lambda self: list(self._data["top"]))
    reference = property(lambda self: self._data.get("reference"))

    def table(self, rank: int = 1) -> Table:
        """The schedule table of the layout ranked ``rank`` (what ``plan -t FILE`` writes for 1)."""
        return Table(self._core.table(_int(rank, "rank")))

    def _summary(self) -> str:
        d = self._data
        head = f"{d['model']} on {d['gpus']} × {d['system']}, global batch {d['global_batch']}: "
        if not d["top"]:
            return head + f"no layout fits ({d['layouts']} layouts, {d['rejected']} rejected)"
        best = d["top"][0]
        return head + (
            f"best {best['description']} {_seconds(best['runtime_s'])} "
            f"({len(d['top'])} ranked of {d['layouts']} layouts)"
        )

    def __repr__(self) -> str:
        lines = [f"<pipetab.PlanResult {self._summary()}"]
        for entry in self._data["top"]:
            lines.append(
                f"  {entry['rank']:>3}. {_seconds(entry['runtime_s']):>10}  "
                f"{_bytes(entry['peak_memory_bytes']):>9}  {entry['description']}"
            )
        return "\n".join(lines) + ">"

    def _html_rows(self):
        rows = [(e["rank"], e["description"], _seconds(e["runtime_s"]),
                 _seconds(e["lower_bound_s"]), _bytes(e["peak_memory_bytes"]))
                for e in self._data["top"]]
        return ["rank", "layout", "runtime", "lower bound", "peak memory"], rows

    def to_pandas(self):
        """One row per ranked layout: its rank, description, runtime, throughput (tokens/s, MFU),
        bound and peak memory, then the layout's values and the runtime's parts in seconds."""
        rows = []
        for entry in self._data["top"]:
            simulation = entry.get("simulation") or {}
            row = {"rank": entry["rank"], "description": entry["description"],
                   "runtime_s": entry["runtime_s"],
                   "tokens_per_s": simulation.get("tokens_per_s"), "mfu": simulation.get("mfu"),
                   "flop_count": simulation.get("flop_count"),
                   "runtime_low_s": (simulation.get("runtime_interval_s") or {}).get("low"),
                   "runtime_high_s": (simulation.get("runtime_interval_s") or {}).get("high"),
                   "lower_bound_s": entry["lower_bound_s"],
                   "peak_memory_bytes": entry["peak_memory_bytes"]}
            row.update(entry["layout"])
            row.update({f"seconds.{k}": v for k, v in entry["seconds"].items()})
            rows.append(row)
        return _pandas().DataFrame(rows)


def _both(value: Union[str, bool, None], name: str) -> str:
    if value is None:
        return "both"
    if value is True:
        return "on"
    if value is False:
        return "off"
    if isinstance(value, str):
        return value
    raise TypeError(f"{name}: expected True, False, None (both) or 'both'/'on'/'off'")


def _int_list(values: Optional[Iterable[int]], name: str) -> list[int]:
    if values is None:
        return []
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        return [int(values)]
    return [_int(v, name) for v in values]


def _str_list(values: Optional[Iterable[str]], name: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    out = list(values)
    for value in out:
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected strings, got {type(value).__name__}")
    return out


def _search(search: Optional[Mapping[str, Iterable[Any]]]) -> list[str]:
    """``{"key": [a, b]}`` as ``--search key=a,b`` (booleans as true/false)."""
    if search is None:
        return []
    if not isinstance(search, Mapping):
        raise TypeError(f"search: expected a mapping of option keys to values, got "
                        f"{type(search).__name__}")
    out = []
    for key, values in search.items():
        if not isinstance(key, str) or "=" in key:
            raise TypeError(f"search: {key!r}: expected an option's key (run_options())")
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            values = [values]
        texts = []
        for value in values:
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            if "," in text or not text:
                raise ValueError(f"search: {key} = {value!r}: expected a value of the option")
            texts.append(text)
        out.append(f"{key}={','.join(texts)}")
    return out


def plan(
    model: Union[str, os.PathLike, Mapping[str, Any]] = "llama2-70b",
    system: Union[str, os.PathLike, Mapping[str, Any]] = "dgx-h100",
    gpus: int = 0,
    global_batch: int = 0,
    *,
    tp: Optional[Iterable[int]] = None,
    pp: Optional[Iterable[int]] = None,
    micro_batch: Optional[Iterable[int]] = None,
    schedules: Optional[Iterable[str]] = None,
    chunks: Optional[Iterable[int]] = None,
    recompute: Iterable[str] = ("none", "selective", "full"),
    sequence_parallel: Union[None, bool, str] = None,
    distributed_optimizer: Union[None, bool, str] = None,
    cp: Optional[Iterable[int]] = None,
    cp_method: Optional[str] = None,
    fsdp: Union[None, bool, str] = None,
    ep: Optional[Iterable[int]] = None,
    etp: Optional[Iterable[int]] = None,
    moe_recompute: Optional[Iterable[str]] = None,
    a2a_overlap: Union[None, bool, str] = None,
    search: Optional[Mapping[str, Iterable[Any]]] = None,
    top: int = 10,
    prune: bool = True,
    threads: int = 0,
    shard: Optional[tuple[int, int]] = None,
    from_run: Optional[str] = None,
    runs: str = "published-runs",
    keep_run_options: bool = False,
    runnable_by: Optional[str] = None,
    job: Optional[PathLike] = None,
    **options: Unpack[PlanOptions],
) -> PlanResult:
    """``pipetab plan``: the fastest TP × CP × PP × DP layouts of a model on ``gpus`` GPUs for a
    global batch, by simulation. Lists restrict a dimension (None: the command's default; ``cp``
    None is 1 and each power of two leaving every rank 2,048 tokens or more, as ``--cp``);
    sequence_parallel, distributed_optimizer and fsdp take True, False or None (both, the
    default, as ``--fsdp both``); cp_method is ring
    (default), allgather or a2a. For a mixture of experts, ``ep`` lists the expert-parallel sizes
    (None: the powers of two dividing the experts), ``etp`` the expert-tensor-parallel sizes
    (None: 1), ``moe_recompute`` what the experts recompute (none, moe_act, mlp; None: the
    job's own) and ``a2a_overlap`` (True, False or None: both) Megatron-Core's 1F1B all-to-all
    overlap. ``search`` maps any other option of a run (:func:`run_options`' keys) to the values
    to try, e.g. ``{"moe_dispatcher": ["alltoall", "deepep"]}`` (``--search``): every layout is
    tried with each combination.

    Every option of a run that plan does not search is a keyword, as for :func:`simulate`
    (:class:`PlanOptions`; :func:`run_options` lists them), e.g. ``seq_len``, ``runtime``,
    ``tp_overlap``, ``dp_overlap``, ``precision`` or ``overheads=False``: over the model's
    defaults, or with ``from_run`` over the run's own options. ``job`` is a torchtitan job TOML or
    Megatron-LM arguments (``--job``): its options apply under the keywords, and its layout is
    ranked as the reference."""
    # seq_len was plan's own keyword, whose 0 meant the model's: it still does.
    if options.get("seq_len") == 0:
        options = {key: value for key, value in options.items() if key != "seq_len"}
    args = _core.PlanArgs()
    _config(args, model, "model")
    _config(args, system, "system")
    args.gpus = _int(gpus, "gpus")
    args.global_batch = _int(global_batch, "global_batch")
    args.settings = _settings("plan", options, refused=_PLAN_SEARCHED)
    args.job = None if job is None else os.fspath(job)
    args.tp = _int_list(tp, "tp")
    args.pp = _int_list(pp, "pp")
    args.micro_batch = _int_list(micro_batch, "micro_batch")
    args.chunks = _int_list(chunks, "chunks")
    args.schedules = _str_list(schedules, "schedules")
    args.recompute = _str_list(recompute, "recompute")
    args.sequence_parallel = _both(sequence_parallel, "sequence_parallel")
    args.distributed_optimizer = _both(distributed_optimizer, "distributed_optimizer")
    args.cp = _int_list(cp, "cp")
    args.cp_method = cp_method
    args.fsdp = _both(fsdp, "fsdp")
    args.ep = _int_list(ep, "ep")
    args.etp = _int_list(etp, "etp")
    args.moe_recompute = _str_list(moe_recompute, "moe_recompute")
    args.a2a_overlap = _both(a2a_overlap, "a2a_overlap")
    args.search = _search(search)
    args.top = _int(top, "top")
    args.prune = prune
    args.threads = _int(threads, "threads")
    k, n = (1, 1) if shard is None else shard
    args.shard = _int(k, "shard")
    args.shards = _int(n, "shard")
    args.from_run = from_run
    args.runs = os.fspath(runs)
    args.keep_run_options = keep_run_options
    args.runnable_by = runnable_by
    return PlanResult(_core.plan(args))


# ------------------------------------------------------------------------------------------------
# Lists


def list_schedules() -> list[dict]:
    """The registered schedules (``pipetab list --format json``)."""
    return json.loads(_core.schedules_json())


def model_presets() -> list[str]:
    """The names of the built-in model presets (``--model NAME``; configs/models/)."""
    return list(_core.model_presets())


def system_presets() -> list[str]:
    """The names of the built-in system presets (``--system NAME``; configs/systems/)."""
    return list(_core.system_presets())


def preset(kind: str, name: str) -> dict:
    """A built-in model or system preset as a dict (kind 'model' or 'system'), e.g. to change a
    value and pass it as ``model=`` or ``system=``."""
    kinds = {"model": "models", "models": "models", "system": "systems", "systems": "systems"}
    if kind not in kinds:
        raise Error(f"preset kind '{kind}': expected model or system")
    return tomllib.loads(_core.preset(kinds[kind], name))


# ------------------------------------------------------------------------------------------------
# The options' keywords in the signatures


def _show_options(function: Any, options_type: type) -> None:
    """Shows ``**options`` as the keywords it takes (inspect.signature, help(), a notebook's
    completion): each keyword-only, typed as the TypedDict types it, None by default (the option
    left to the job file, the model file or the default)."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    taken = {p.name for p in parameters}
    for name, hint in typing.get_type_hints(options_type).items():
        if name not in taken:
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=None, annotation=Optional[hint]))
    function.__signature__ = signature.replace(parameters=parameters)


for _function, _options in ((analyze, _TableRunOptions), (simulate, _TableRunOptions),
                            (compare, _TableRunOptions), (tune, RunOptions), (plan, PlanOptions)):
    _show_options(_function, _options)
del _function, _options
