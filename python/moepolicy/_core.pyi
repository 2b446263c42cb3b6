"""Type stubs of the extension moepolicy._core (python/src/*.cpp)."""

import os
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

ArrayLike = npt.ArrayLike  # numpy arrays, lists, anything with __array__ (a CPU torch tensor)
PathLike = Union[str, os.PathLike[str]]

class ParseError(ValueError):
    """A malformed or unreadable trace or table."""

    file: str
    line: Optional[int]
    byte_offset: Optional[int]
    problem: str

class Trace:
    """A validated routing trace, sorted by (request, step, layer, position), stored by column."""

    @property
    def model(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def has_scores(self) -> bool: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def num_steps(self) -> int: ...
    @property
    def num_batches(self) -> int: ...
    @property
    def request_names(self) -> list[str]: ...
    @property
    def request(self) -> npt.NDArray[np.uint32]: ...
    @property
    def step(self) -> npt.NDArray[np.uint32]: ...
    @property
    def position(self) -> npt.NDArray[np.uint32]: ...
    @property
    def layer(self) -> npt.NDArray[np.uint16]: ...
    @property
    def phase(self) -> npt.NDArray[np.uint8]: ...
    @property
    def experts(self) -> npt.NDArray[np.uint16]: ...
    @property
    def weights(self) -> npt.NDArray[np.float32]: ...
    @property
    def scores(self) -> npt.NDArray[np.float32]: ...
    def __len__(self) -> int: ...
    def batches(self) -> dict[str, npt.NDArray[Any]]: ...
    def steps(self) -> dict[str, npt.NDArray[Any]]: ...
    @staticmethod
    def from_arrays(
        experts: ArrayLike,
        weights: ArrayLike,
        layer: ArrayLike,
        step: ArrayLike,
        request: ArrayLike,
        phase: ArrayLike,
        *,
        position: Optional[ArrayLike] = None,
        scores: Optional[ArrayLike] = None,
        num_layers: Optional[int] = None,
        num_experts: Optional[int] = None,
        request_names: Optional[Sequence[str]] = None,
        model: str = "",
        source: str = "python",
    ) -> Trace: ...
    def write_canonical(self, path: PathLike) -> None: ...

def read_trace(path: Union[PathLike, Sequence[PathLike]]) -> Trace: ...
def detect_trace_format(path: PathLike) -> str: ...
def write_canonical(trace: Trace, path: PathLike) -> None: ...
def eviction_policies() -> list[tuple[str, str]]: ...

class ExpertCache:
    def __init__(
        self,
        policy: str,
        num_layers: int,
        num_experts: int,
        capacity: int,
        *,
        per_layer: bool = False,
        unit: str = "experts",
        expert_bytes: int = 0,
        footprints: Optional[ArrayLike] = None,
    ) -> None: ...
    def access(
        self, layer: int, experts: ArrayLike, weights: Optional[ArrayLike] = None, scores: Optional[ArrayLike] = None
    ) -> npt.NDArray[np.bool_]: ...
    def hint(self, layer: int, experts: ArrayLike, confidence: Union[float, ArrayLike] = 1.0) -> None: ...
    def end_step(self) -> None: ...
    def victim(self, layer: int = 0) -> Optional[tuple[int, int]]: ...
    def contains(self, layer: int, expert: int) -> bool: ...
    def reset_stats(self) -> None: ...
    def clear(self) -> None: ...
    @property
    def policy(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def resident_count(self) -> int: ...
    @property
    def stats(self) -> dict[str, Any]: ...

def replay_cache(
    trace: Trace,
    policy: str,
    capacity: int,
    *,
    per_layer: bool = False,
    unit: str = "experts",
    expert_bytes: int = 0,
    footprints: Optional[ArrayLike] = None,
    prefill: bool = True,
    decode: bool = True,
    reset_between_requests: bool = False,
) -> dict[str, Any]: ...
def lru_hit_curve(trace: Trace, *, per_layer: bool = False, prefill: bool = True, decode: bool = True) -> dict[str, Any]: ...
def replay_accesses(
    trace: Trace, *, prefill: bool = True, decode: bool = True
) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16]]: ...

class BalanceResult:
    @property
    def sides(self) -> npt.NDArray[np.uint8]: ...
    @property
    def load_seconds(self) -> float: ...
    @property
    def cpu_seconds(self) -> float: ...
    @property
    def loaded(self) -> int: ...
    @property
    def on_cpu(self) -> int: ...
    @property
    def makespan(self) -> float: ...

class TwoPointerBalancer:
    def __init__(self, cpu_seconds_per_token: float, load_seconds: float, max_items: int = 256) -> None: ...
    def balance(self, batch_sizes: ArrayLike) -> BalanceResult: ...
    def balance_optimal(self, batch_sizes: ArrayLike) -> BalanceResult: ...
    @property
    def cpu_seconds_per_token(self) -> float: ...
    @property
    def load_seconds(self) -> float: ...

def balance_exact(load: ArrayLike, cpu: ArrayLike) -> BalanceResult: ...

class Router:
    def __init__(self, num_experts: int, top_k: int, *, alpha: float = 0.3, prefer_batch_shared: bool = False) -> None: ...
    def route(
        self, ids: ArrayLike, weights: ArrayLike, scores: Optional[ArrayLike] = None, resident: Optional[ArrayLike] = None
    ) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32], dict[str, Any]]: ...

class MakespanSolver:
    def __init__(self, solver: str = "local-search") -> None: ...
    def solve(
        self,
        exec: ArrayLike,
        dram: ArrayLike,
        home: Optional[ArrayLike] = None,
        resident: Optional[ArrayLike] = None,
        *,
        num_dimms: int = 1,
    ) -> dict[str, Any]: ...
    @property
    def name(self) -> str: ...

def solve_steps(
    step: ArrayLike,
    exec: ArrayLike,
    dram: ArrayLike,
    home: Optional[ArrayLike] = None,
    resident: Optional[ArrayLike] = None,
    *,
    num_dimms: int = 1,
    solver: str = "local-search",
) -> dict[str, Any]: ...

class EmaLoadPredictor:
    def __init__(
        self,
        num_layers: int,
        num_experts: int,
        *,
        alpha: float = 0.3,
        hot_share: float = 0.5,
        cold_share: float = 0.1,
        warm_start: bool = True,
    ) -> None: ...
    def update(self, layer: int, loads: ArrayLike) -> None: ...
    def predicted_loads(self, layer: int) -> npt.NDArray[np.float64]: ...
    def predicted_classes(self, layer: int) -> npt.NDArray[np.uint8]: ...
    def updates(self, layer: int) -> int: ...
    def reset(self) -> None: ...

class PrecisionTargetSelector:
    def __init__(
        self,
        num_layers: int,
        num_experts: int,
        capacity: Union[int, ArrayLike],
        *,
        mode: str = "margin",
        margin: float = 0.0,
        rank_slack: int = 0,
        slack_form: str = "symmetric",
        min_hotness: float = 0.0,
    ) -> None: ...
    def select(
        self, layer: int, hotness: ArrayLike, current: Optional[ArrayLike] = None
    ) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16], npt.NDArray[np.uint16]]: ...
    def set_capacity(self, layer: int, capacity: int) -> None: ...
    def reset(self) -> None: ...

def prefix_split(
    bits: ArrayLike,
    loss: ArrayLike,
    average_bits: float,
    *,
    form: str = "exact",
    rounding: str = "down",
    weights: Optional[ArrayLike] = None,
) -> dict[str, Any]: ...
def exact_allocation(
    bits: ArrayLike,
    loss: ArrayLike,
    average_bits: float,
    *,
    form: str = "exact",
    rounding: str = "down",
    weights: Optional[ArrayLike] = None,
    min_count: Optional[ArrayLike] = None,
) -> dict[str, Any]: ...
def place_from_prefill(
    counts: ArrayLike,
    weight_sums: ArrayLike,
    losses: Optional[ArrayLike] = None,
    bits: Optional[ArrayLike] = None,
    *,
    gpu_experts_per_layer: int = 4,
    alpha: float = 0.5,
    normalization: str = "sum_to_one",
    select_bitwidths: bool = True,
    ndp_average_bits: float = 3.0,
    uniform_bits: int = 3,
    gpu_bits: int = 16,
    form: str = "exact",
    rounding: str = "down",
) -> dict[str, Any]: ...
def batched_decode_steps(
    trace: Trace, batch_size: int, *, formation: str = "concurrent_sequences"
) -> npt.NDArray[np.uint32]: ...
def rebalance_experts(
    weight: ArrayLike,
    num_replicas: int,
    num_groups: int,
    num_nodes: int,
    num_gpus: int,
    *,
    algorithm: str = "moepolicy",
    current: Optional[ArrayLike] = None,
    balance_tolerance: float = 0.0,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
