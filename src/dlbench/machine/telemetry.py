"""What dlbench records about the machine around a point, beside what the point measured: contention from other
processes during its measured windows, the energy those windows took, the GPU clocks while measured, and whether
its GPUs were idle before it started.

Points are JSON in the store, so this record lives in ``PointResult.extra["telemetry"]`` (`KEY`) and reads back
through `telemetry_of`; a point stored before it has none (None), and every field has a default. The figures are
plain data; the controller's watcher (launch/watch.py) fills them.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.records import PointResult

KEY = "telemetry"
VERSION = 1
# A point is flagged as measured under contention when processes outside it used more than a quarter of its
# CPUs' time during its measured windows (see README "Contention and energy" for why a quarter).
CONTENTION_SHARE = 0.25
BUSY_BYTES = 1 << 30  # a GPU holding more than this before a point starts is not idle (a driver holds far less)
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Spread:
    """Min, median and max of samples taken while measured, and how many."""

    min: float
    median: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread | None:
        """The spread of the samples; None for none."""
        if not samples:
            return None
        return cls(min(samples), statistics.median(samples), max(samples), len(samples))


@dataclass(frozen=True)
class Contention:
    """Other processes' use of the point's CPUs (and GPUs) during its measured windows.

    ``others_share`` = (busy CPU time of the point's CPUs in /proc/stat - the point's own process tree's CPU time)
    / (the CPUs' total time), over the measured windows; None when it could not be measured (``note`` says why).
    """

    others_share: float | None = None
    cpus: int = 0
    window_s: float = 0.0
    load_avg: tuple[float, float, float] | None = None  # os.getloadavg() at the end of the last window
    gpu_other_processes: int | None = None  # most processes outside the point on its GPUs at once, while measured
    threshold: float = CONTENTION_SHARE
    waited_s: float | None = None  # --wait-quiet: how long the point waited for a quiet machine
    quiet_at_start: bool | None = None  # --wait-quiet: False when it waited in vain
    note: str = ""
    needed_share: float = 1.0  # the share of its CPUs the point's threads need (1: all; --threads 1 of 2 cores: 0.5)

    @property
    def allowed_share(self) -> float:
        """The most of its CPUs others may use before the point is flagged: the CPUs it does not need, and the
        threshold's share of those it needs (the threshold alone for a point that needs them all)."""
        need = min(1.0, max(0.0, self.needed_share))
        return (1.0 - need) + self.threshold * need

    @property
    def flagged(self) -> bool:
        """Whether the point was measured under contention: others held more of the CPUs its threads need than the
        threshold allows (allowed_share), or others ran on its GPUs."""
        return (self.others_share is not None and self.others_share > self.allowed_share + 1e-9) or bool(
            self.gpu_other_processes
        )

    def describe(self) -> str:
        """'others used 48% of its 2 CPUs (load 3.10)', or why it is unknown."""
        if self.others_share is None:
            text = f"contention unknown: {self.note}" if self.note else "contention unknown"
        else:
            text = f"others used {self.others_share:.0%} of its {self.cpus} CPU{'s' if self.cpus != 1 else ''}"
            if self.needed_share < 1.0:
                text += f", of which its threads needed {self.needed_share:.0%}"
        if self.load_avg is not None:
            text += f" (load {self.load_avg[0]:.2f})"
        if self.gpu_other_processes:
            text += f"; {self.gpu_other_processes} other process(es) on its GPUs"
        if self.quiet_at_start is False:
            text += f"; waited {self.waited_s:g} s for a quiet machine in vain"
        return text


@dataclass(frozen=True)
class ThreadChoice:
    """How many threads a point's ranks ran with, and why: `--threads auto` (the default) measures others' share of
    the CPUs just before the point and gives it the physical cores they leave free (at least one)."""

    requested: str  # "auto", or the explicit count
    used: int  # threads per rank
    ranks: int = 1  # ranks on this node, each with `used` threads
    cores: int = 0  # the physical cores the point may run on
    others_share: float | None = None  # others' share of its CPUs just before it (auto only)
    reason: str = ""

    @property
    def needed_share(self) -> float:
        """The share of its cores the point's threads need (1 where unknown)."""
        return min(1.0, self.used * self.ranks / self.cores) if self.cores > 0 else 1.0


@dataclass(frozen=True)
class Energy:
    """Energy of the measured windows, summed over the point's devices (its GPUs, or the CPU packages).

    ``source``: ``nvml_energy_counter`` (NVML's total-energy counter), ``nvml_power_integrated`` (sampled power,
    integrated: GPUs without the counter), ``rapl`` (the CPU packages' RAPL counters: the whole package, other
    processes' work included), or ``unavailable`` with the reason.
    """

    joules: float | None = None
    source: str = "unavailable"
    window_s: float = 0.0
    samples: int = 0  # global samples trained in the measured windows
    devices: int = 0
    price_per_hour: float | None = None  # --price-per-hour: what one device costs per hour, currency-free
    reason: str = ""

    @property
    def avg_watts(self) -> float | None:
        """Average power over the measured windows."""
        return self.joules / self.window_s if self.joules is not None and self.window_s > 0 else None

    @property
    def samples_per_kwh(self) -> float | None:
        """Samples trained per kilowatt-hour."""
        if not self.joules or self.joules <= 0 or not self.samples:
            return None
        return self.samples / (self.joules / JOULES_PER_KWH)

    def cost_per_million(self, throughput: float | None) -> float | None:
        """What a million samples cost at --price-per-hour per device, at this throughput."""
        if self.price_per_hour is None or not throughput or throughput <= 0:
            return None
        return self.price_per_hour * max(1, self.devices) * (1e6 / throughput) / 3600.0


@dataclass(frozen=True)
class DeviceIdle:
    """One of the point's GPUs just before it started: the processes NVML listed on it and its used memory."""

    device: str  # "0 (GPU-3f2a...)": CUDA ordinal and UUID
    processes: int | None
    used_bytes: int | None

    @property
    def idle(self) -> bool:
        """No process and no more than BUSY_BYTES in use (unknown counts as idle: nothing says otherwise)."""
        return not self.processes and (self.used_bytes is None or self.used_bytes <= BUSY_BYTES)


@dataclass(frozen=True)
class Telemetry:
    """The machine's state around one point (see the module's docstring)."""

    version: int = VERSION
    watcher: str = "controller"  # who sampled: the controller, or "none" (ranks it cannot see)
    contention: Contention = field(default_factory=Contention)
    energy: Energy = field(default_factory=Energy)
    clocks: dict[str, Spread] = field(default_factory=dict)  # sm_mhz, mem_mhz, temperature_c, power_w
    idle: tuple[DeviceIdle, ...] = ()
    nvml_errors: int = 0  # NVML calls that failed while sampling (the sampler went on)
    nvml_error: str = ""  # the last one
    threads: ThreadChoice | None = None  # the threads the point ran with and why (None: stored before #42)

    @property
    def idle_at_start(self) -> bool:
        """Whether every GPU of the point was idle before it started (True on the CPU)."""
        return all(d.idle for d in self.idle)

    @property
    def flagged(self) -> bool:
        """Whether the point was measured under contention or started on a busy GPU."""
        return self.contention.flagged or not self.idle_at_start

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (the form kept in PointResult.extra)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Telemetry:
        """Rebuild from JSON; unknown keys are ignored and missing ones take their defaults."""
        c = _known(Contention, d.get("contention") or {})
        if c.get("load_avg") is not None:
            c["load_avg"] = tuple(c["load_avg"])
        return cls(
            version=int(d.get("version", VERSION)),
            watcher=str(d.get("watcher", "controller")),
            contention=Contention(**c),
            energy=Energy(**_known(Energy, d.get("energy") or {})),
            clocks={k: Spread(**_known(Spread, v)) for k, v in (d.get("clocks") or {}).items()},
            idle=tuple(DeviceIdle(**_known(DeviceIdle, x)) for x in d.get("idle") or ()),
            nvml_errors=int(d.get("nvml_errors", 0)),
            nvml_error=str(d.get("nvml_error", "")),
            threads=ThreadChoice(**_known(ThreadChoice, d["threads"]))
            if isinstance(d.get("threads"), Mapping)
            else None,
        )


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def telemetry_of(result: PointResult) -> Telemetry | None:
    """The telemetry stored with a point; None for a point stored without it (or with an unreadable one)."""
    raw = result.extra.get(KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        return Telemetry.from_dict(raw)
    except (TypeError, ValueError):
        return None


def with_telemetry(result: PointResult, telemetry: Telemetry) -> PointResult:
    """The result with its telemetry kept in extra."""
    return dataclasses.replace(result, extra={**result.extra, KEY: telemetry.to_dict()})


__all__ = [
    "BUSY_BYTES",
    "CONTENTION_SHARE",
    "KEY",
    "Contention",
    "DeviceIdle",
    "Energy",
    "Spread",
    "Telemetry",
    "ThreadChoice",
    "telemetry_of",
    "with_telemetry",
]
