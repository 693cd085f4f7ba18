"""Plain-data records of what a point measured. Every persisted record carries a schema version."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from dlbench.spec import PointSpec

SCHEMA_VERSION = 2  # store schema; see results/migrations.py

Status = Literal["ok", "oom", "crashed", "timeout", "error", "unsupported", "failed_check"]
STATUSES: tuple[str, ...] = ("ok", "oom", "crashed", "timeout", "error", "unsupported", "failed_check")


@dataclass(frozen=True)
class RepeatRaw:
    """One repeat on one rank: every measured step's time (s), measured between device-synchronised clock reads."""

    step_times: tuple[float, ...]
    wall_s: float

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RepeatRaw:
        """Rebuild from JSON."""
        return cls(step_times=tuple(float(x) for x in d["step_times"]), wall_s=float(d["wall_s"]))  # type: ignore[union-attr,arg-type]


@dataclass(frozen=True)
class RankRaw:
    """Everything one rank (one worker process) measured."""

    rank: int
    repeats: tuple[RepeatRaw, ...]
    peak_memory_bytes: int | None = None
    memory_kind: str = "rss"  # "cuda_max_allocated" on GPU, "rss" (worker peak RSS) on CPU
    final_loss: float | None = None
    input_wait_s: float = 0.0
    param_checksum: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RankRaw:
        """Rebuild from JSON."""
        d = dict(d)
        d["repeats"] = tuple(RepeatRaw.from_dict(r) for r in d["repeats"])  # type: ignore[union-attr]
        return cls(**d)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Metrics:
    """Figures derived from the raw samples (see protocol/stats.py for each definition)."""

    throughput: float
    statistic: str
    repeat_throughputs: tuple[float, ...]
    ci_low: float
    ci_high: float
    ci_level: float
    cv: float
    median_step_s: float
    global_batch: int
    peak_memory_bytes: int | None
    memory_kind: str
    final_loss: float | None
    noisy: bool
    input_wait_share: float = 0.0
    input_bound: bool = False  # input_wait_share above protocol.stats.INPUT_BOUND_SHARE

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Metrics:
        """Rebuild from JSON."""
        d = dict(d)
        d["repeat_throughputs"] = tuple(d["repeat_throughputs"])  # type: ignore[arg-type]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # type: ignore[arg-type]


@dataclass(frozen=True)
class Environment:
    """Identity keys must match before two results are compared; descriptive keys are only shown."""

    identity: dict[str, str] = field(default_factory=dict)
    descriptive: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PointResult:
    """A finished point: its spec, status, raw samples per rank, derived metrics and environment."""

    spec: PointSpec
    status: Status
    ranks: tuple[RankRaw, ...] = ()
    metrics: Metrics | None = None
    env: Environment = field(default_factory=Environment)
    error: str | None = None
    started: float = 0.0
    finished: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict."""
        return dataclasses.asdict(self)
