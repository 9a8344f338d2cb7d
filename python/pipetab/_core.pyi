# Types of the extension module pipetab._core (python/src/core.cpp). Private: the public API is
# the pipetab package, typed in __init__.py (PEP 561 marker: py.typed).
from typing import Any, Optional

import numpy as np

__version__: str

class Error(ValueError): ...
class ParamError(Error): ...

class ParseError(Error):
    file: str
    line: int
    column: int

class Table:
    name: str
    devices: int
    stages: int
    microbatches: int
    pipelines: int
    num_ops: int
    has_comms: bool
    path: Optional[str]
    params_json: Optional[str]
    def same_schedule(self, other: Table) -> bool: ...
    def export(self, format: str, force: bool = ...) -> str: ...
    def ops(self) -> dict[str, np.ndarray]: ...
    def timing(self, costs: Optional[str] = ...) -> tuple[np.ndarray, np.ndarray]: ...

class SimulationRun:
    json: str
    title: str
    op_start: np.ndarray
    op_end: np.ndarray
    def svg(self, title: Optional[str] = ...) -> str: ...
    def trace(self) -> str: ...
    def write_trace(self, path: str) -> tuple[int, int, int]: ...

# A keyword's setting: the option's key (sim/options.hpp), its value as text, the keyword.
Keyword = tuple[str, str, str]

class SimArgs:
    system: str
    system_text: Optional[str]
    model: str
    model_text: Optional[str]
    settings: list[Keyword]
    job: Optional[str]
    gpus: Optional[int]
    costs: Optional[str]
    input_grad_frees: float
    def __init__(self) -> None: ...

class PlanArgs:
    model: str
    model_text: Optional[str]
    system: str
    system_text: Optional[str]
    gpus: int
    global_batch: int
    settings: list[Keyword]
    job: Optional[str]
    top: int
    prune: bool
    threads: int
    shard: int
    shards: int
    from_run: Optional[str]
    runs: str
    keep_run_options: bool
    runnable_by: Optional[str]
    # The search space (PlanSpaceText): lists of sizes, or both/on/off.
    def __init__(self) -> None: ...
    def __setattr__(self, name: str, value: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

def run_options() -> list[dict[str, Any]]: ...
def plan_searched() -> list[str]: ...
def run_shape(
    args: SimArgs,
    devices: Optional[int],
    microbatches: Optional[int],
    chunks: Optional[int],
    default_devices: int,
) -> tuple[Optional[str], Optional[int], Optional[int], Optional[int]]: ...

class SweepResult:
    columns: list[str]
    begin: int
    end: int
    def csv(self, header: bool = ...) -> str: ...
    def jsonl(self) -> str: ...
    def rows_json(self) -> str: ...
    def __len__(self) -> int: ...

class PlanOutcome:
    json: str
    def table(self, rank: int = ...) -> Table: ...

def __getattr__(name: str) -> Any: ...
