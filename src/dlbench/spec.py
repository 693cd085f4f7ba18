"""What one benchmark point is: frozen, self-checking dataclasses that travel to the worker as JSON."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Literal

Precision = Literal["fp32", "amp", "bf16"]
Statistic = Literal["mean", "median"]
DataSource = Literal["synthetic", "real"]
Device = Literal["cpu", "cuda"]

PRECISIONS: tuple[str, ...] = ("fp32", "amp", "bf16")
STATISTICS: tuple[str, ...] = ("mean", "median")
DATA_SOURCES: tuple[str, ...] = ("synthetic", "real")
DEVICES: tuple[str, ...] = ("cpu", "cuda")
STRATEGIES: tuple[str, ...] = ("none", "ddp", "allreduce", "ps", "mirrored", "multiworker", "sharding", "fleet")

SPEC_VERSION = 1


class SpecError(ValueError):
    """A spec value that cannot be run; the message says how to fix it."""


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


@dataclass(frozen=True)
class Protocol:
    """How a point is measured: warm-up steps, measured steps, repeats and the statistic over repeats."""

    warmup: int
    steps: int
    repeats: int
    statistic: Statistic
    preset: str = "custom"

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise SpecError(f"warmup must be >= 0; got {self.warmup}")
        if self.steps < 1:
            raise SpecError(f"steps must be >= 1; got {self.steps}")
        if self.repeats < 1:
            raise SpecError(f"repeats must be >= 1; got {self.repeats}")
        _choice("statistic", self.statistic, STATISTICS)

    def override(self, warmup: int | None = None, steps: int | None = None,
                 repeats: int | None = None, statistic: str | None = None) -> Protocol:
        """This protocol with the given fields replaced (None keeps a field)."""
        changes = {k: v for k, v in dict(warmup=warmup, steps=steps, repeats=repeats,
                                          statistic=statistic).items() if v is not None}
        return dataclasses.replace(self, **changes)


# The seeds' methodologies (see README "Presets").
PRESETS: dict[str, Protocol] = {
    "quick": Protocol(warmup=2, steps=5, repeats=3, statistic="median", preset="quick"),
    "caict": Protocol(warmup=20, steps=100, repeats=3, statistic="mean", preset="caict"),
    "dlperf": Protocol(warmup=20, steps=100, repeats=7, statistic="median", preset="dlperf"),
    "tf_cnn": Protocol(warmup=10, steps=100, repeats=5, statistic="mean", preset="tf_cnn"),
}


def preset(name: str) -> Protocol:
    """The named preset, or a SpecError listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


_SCALE = re.compile(r"^(\d+)n(\d+)[cgd]$")


def parse_scale(text: str) -> tuple[int, int]:
    """'2n8c' (the seeds' notation; g or d also accepted) -> (nodes, devices per node)."""
    m = _SCALE.match(text.strip().lower())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise SpecError(f"scale must look like 1n1c, 1n4c or 2n8c (nodes n devices c); got {text!r}")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class PointSpec:
    """One benchmark point: what to train, how, and how to measure it. Batch size is per device."""

    framework: str
    model: str
    batch_size: int
    protocol: Protocol
    precision: Precision = "fp32"
    compile: bool = False
    channels_last: bool = False
    device: Device = "cpu"
    data: DataSource = "synthetic"
    data_dir: str | None = None
    loader_workers: int = 2
    input_size: int | None = None
    nodes: int = 1
    devices_per_node: int = 1
    strategy: str = "none"
    launcher: str = "local"
    timeout_s: float = 1800.0
    memory_limit_bytes: int | None = None
    threads: int | None = None
    seed: int = 0
    version: int = field(default=SPEC_VERSION)

    def __post_init__(self) -> None:
        if not self.framework:
            raise SpecError("framework must be named")
        if not self.model:
            raise SpecError("model must be named")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SpecError(f"batch size must be a whole number >= 1; got {self.batch_size!r}")
        _choice("precision", self.precision, PRECISIONS)
        _choice("device", self.device, DEVICES)
        _choice("data", self.data, DATA_SOURCES)
        _choice("strategy", self.strategy, STRATEGIES)
        if self.data == "real" and not self.data_dir:
            raise SpecError("real data needs a data folder: make one with `dlbench data imagenet` and pass --data-dir")
        if self.input_size is not None and self.input_size < 1:
            raise SpecError(f"input size must be >= 1; got {self.input_size}")
        if self.nodes < 1 or self.devices_per_node < 1:
            raise SpecError("nodes and devices per node must be >= 1")
        if self.timeout_s <= 0:
            raise SpecError(f"timeout must be > 0 seconds; got {self.timeout_s}")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise SpecError("memory limit must be > 0")
        if self.loader_workers < 0:
            raise SpecError("loader workers must be >= 0")

    @property
    def world_size(self) -> int:
        """Number of devices across all nodes."""
        return self.nodes * self.devices_per_node

    @property
    def global_batch(self) -> int:
        """Samples per step across all devices: per-device batch x world size."""
        return self.batch_size * self.world_size

    @property
    def scale(self) -> str:
        """The seeds' notation, e.g. 1n1c."""
        return f"{self.nodes}n{self.devices_per_node}c"

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys), stable enough to identify a point."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def key(self) -> str:
        """Identity of the configuration (timeout and protocol excluded), used to resume and to match points."""
        d = self.to_dict()
        for k in ("timeout_s", "version", "protocol"):
            d.pop(k)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> PointSpec:
        """Rebuild from to_dict() output; unknown keys are an error, missing ones take defaults."""
        d = dict(d)
        proto = d.pop("protocol")
        if not isinstance(proto, dict):
            raise SpecError("spec.protocol must be an object")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        return cls(protocol=Protocol(**proto), **d)  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, text: str) -> PointSpec:
        """Rebuild from to_json() output."""
        return cls.from_dict(json.loads(text))
