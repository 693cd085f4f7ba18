"""What a measurement is: raw repeats per rank, derived metrics, status. Below every layer but `spec`: it imports
nothing else of dlbench. Every persisted record carries a schema version."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from dlbench.spec import PointSpec

# The store schema version is store/migrations.py STORE_SCHEMA_VERSION; these records read older JSON (from_dict).

Status = Literal["ok", "oom", "crashed", "timeout", "error", "unsupported", "failed_check"]
STATUSES: tuple[str, ...] = ("ok", "oom", "crashed", "timeout", "error", "unsupported", "failed_check")
FINE_STATUSES: tuple[str, ...] = ("ok", "unsupported")  # ended as it should: measured, or refused with a reason
# Fewer repeats than this give no spread: no confidence interval, no CV, and "noisy" unknown (None), never false.
MIN_REPEATS_FOR_SPREAD = 3


def exit_code(statuses: Iterable[str]) -> int:
    """The exit code of `run` and `sweep`: 0 when every point ended ok or was refused as unsupported, else 1."""
    return 0 if all(s in FINE_STATUSES for s in statuses) else 1


@dataclass(frozen=True)
class RepeatRaw:
    """One repeat on one rank: its measured steps, timed in windows synchronised with the device only at their
    two ends (window timing), or step by step (``step_times``, under --sync-every-step and in stores written
    before window timing, where each step is its own window).

    ``wall_s`` is the time from the clock read before the first measured step to the one after the last: the sum
    of the windows. ``device_step_s`` are per-step device times from the framework's device events (CUDA events
    in torch), where it has them: the device's own view, free of host overhead, kept beside the wall times.
    """

    step_times: tuple[float, ...]
    wall_s: float
    window_s: tuple[float, ...] = ()
    window_steps: tuple[int, ...] = ()
    device_step_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.window_s) != len(self.window_steps):
            raise ValueError("window_s and window_steps must have one entry per window")

    @property
    def windows(self) -> tuple[tuple[int, float], ...]:
        """(steps, seconds) of each window; one window per step when steps were timed one by one."""
        if self.window_s:
            return tuple(zip(self.window_steps, self.window_s))
        return tuple((1, t) for t in self.step_times)

    @property
    def steps(self) -> int:
        """Measured steps in this repeat."""
        return sum(n for n, _ in self.windows)

    @property
    def step_samples(self) -> tuple[float, ...]:
        """Per-step time samples: each window's mean step time (each step's own time when timed one by one)."""
        return tuple(s / n for n, s in self.windows)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RepeatRaw:
        """Rebuild from JSON (stores written before window timing have step_times and wall_s only)."""
        return cls(
            step_times=tuple(float(x) for x in d.get("step_times", ())),
            wall_s=float(d["wall_s"]),
            window_s=tuple(float(x) for x in d.get("window_s", ())),
            window_steps=tuple(int(x) for x in d.get("window_steps", ())),
            device_step_s=tuple(float(x) for x in d.get("device_step_s", ())),
        )


@dataclass(frozen=True)
class RankRaw:
    """Everything one rank (one worker process) measured.

    ``peak_memory_bytes`` / ``memory_kind`` is the figure that compares across frameworks: on a GPU the device
    memory the process used, from NVML (``nvml_process``, or ``nvml_device_delta`` where NVML cannot attribute
    memory to processes); on the CPU the worker's peak resident set (``rss``). The framework's own allocator
    peak, where it has one, is kept beside it (``allocator_peak_bytes`` / ``allocator_kind``, e.g.
    ``torch_max_allocated``): allocators count differently, so it is shown, never compared across frameworks.
    """

    rank: int
    repeats: tuple[RepeatRaw, ...]
    peak_memory_bytes: int | None = None
    memory_kind: str = "rss"
    final_loss: float | None = None
    input_wait_s: float = 0.0
    param_checksum: float | None = None
    allocator_peak_bytes: int | None = None
    allocator_kind: str = ""
    device_timer: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankRaw:
        """Rebuild from JSON (older records lack the later fields, which take their defaults)."""
        d = dict(d)
        d["repeats"] = tuple(RepeatRaw.from_dict(r) for r in d["repeats"])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Metrics:
    """Figures derived from the raw samples (see protocol/stats.py for each definition)."""

    throughput: float
    statistic: str
    repeat_throughputs: tuple[float, ...]
    ci_low: float | None  # None below MIN_REPEATS_FOR_SPREAD repeats (as are cv and noisy)
    ci_high: float | None
    ci_level: float
    cv: float | None
    median_step_s: float
    global_batch: int
    peak_memory_bytes: int | None
    memory_kind: str
    final_loss: float | None
    noisy: bool | None
    input_wait_share: float = 0.0
    input_bound: bool = False  # input_wait_share above protocol.stats.INPUT_BOUND_SHARE
    measured_steps: int = 0  # per repeat and rank
    timing: str = "per_step"  # "window" (synchronised at window ends) or "per_step" (--sync-every-step)
    device_median_step_s: float | None = None  # from device events, where the framework has them
    allocator_peak_bytes: int | None = None
    allocator_kind: str = ""

    @property
    def repeats(self) -> int:
        """How many repeats the figure is over (n)."""
        return len(self.repeat_throughputs)

    @property
    def has_spread(self) -> bool:
        """Whether there are enough repeats for a confidence interval, a CV and a noisy verdict."""
        return self.ci_low is not None and self.ci_high is not None and self.cv is not None

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Metrics:
        """Rebuild from JSON; a point stored with fewer than MIN_REPEATS_FOR_SPREAD repeats (older stores kept
        ci_low = ci_high, cv 0 and noisy false for it) reads without a spread."""
        d = without_spread(dict(d))
        d["repeat_throughputs"] = tuple(d["repeat_throughputs"])  # type: ignore[arg-type]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # type: ignore[arg-type]


def without_spread(d: dict[str, object]) -> dict[str, object]:
    """Metrics JSON with ci_low, ci_high, cv and noisy set to None when it has too few repeats for them."""
    repeats = d.get("repeat_throughputs")
    if isinstance(repeats, (list, tuple)) and len(repeats) < MIN_REPEATS_FOR_SPREAD:
        return {**d, "ci_low": None, "ci_high": None, "cv": None, "noisy": None}
    return d


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
