"""What one benchmark point is: frozen, self-checking dataclasses that travel to the worker as JSON."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from dlbench.parallel import Layout, option_fields

Precision = Literal["fp32", "tf32", "amp", "bf16", "fp8"]
Statistic = Literal["mean", "median"]
DataSource = Literal["synthetic", "real"]
Device = Literal["cpu", "cuda"]

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp", "bf16", "fp8")
CONVERGE_REFERENCES: tuple[str, ...] = ("shipped", "local")  # what --converge judges against (#44)
STATISTICS: tuple[str, ...] = ("mean", "median")
DATA_SOURCES: tuple[str, ...] = ("synthetic", "real")
DEVICES: tuple[str, ...] = ("cpu", "cuda")
STRATEGIES: tuple[str, ...] = (
    "none",
    "ddp",
    "allreduce",
    "ps",
    "mirrored",
    "multiworker",
    "sharding",
    "fleet",
    # gradient strategies (#22): where parameters live and how gradients meet
    "ps-cpu",
    "ps-gpu",
    "replicated-nccl",
    "replicated-copy",
    "replicated-pscpu",
    "independent",
    "dp",
    "ddp-fp16",
    "ddp-bf16",
    "powersgd",
    "horovod",
)
# Strategies where one process drives every device of the point (TF's MirroredStrategy and variable managers,
# MXNet's kvstores over N contexts, torch's DataParallel): one worker, N devices.
SINGLE_PROCESS_STRATEGIES: tuple[str, ...] = (
    "mirrored",
    "ps-cpu",
    "ps-gpu",
    "replicated-nccl",
    "replicated-copy",
    "replicated-pscpu",
    "independent",
    "dp",
)
# ... except where a framework runs the same mechanism as one process per device (torch's replicated-pscpu is DDP
# with its buckets reduced on the CPU).
PROCESS_PER_DEVICE: tuple[tuple[str, str], ...] = (("torch", "replicated-pscpu"),)
# Server processes a launcher starts beside the point's workers (they report nothing), as (framework, strategy,
# fixed count, count per device): MXNet's dist_sync kvstore (`ps`) needs its scheduler and one server; TF's
# ParameterServerStrategy (`ps`) one worker server per device and one ps task, driven by ONE coordinator process.
SERVER_PROCESSES: tuple[tuple[str, str, int, int], ...] = (("mxnet", "ps", 2, 0), ("tf", "ps", 1, 1))
COORDINATED: tuple[tuple[str, str], ...] = (("tf", "ps"),)  # one coordinator process, its servers compute
# Strategies whose replicas exchange nothing: their parameters are expected to differ after the measured steps.
NO_EXCHANGE_STRATEGIES: tuple[str, ...] = ("independent",)
# Strategies with gradient buckets whose size --bucket-mb sets (torch's DDP and its communication hooks).
BUCKET_STRATEGIES: tuple[str, ...] = ("ddp", "ddp-fp16", "ddp-bf16", "powersgd", "replicated-pscpu")

SPEC_VERSION = 3  # 2: tf32, sync_every_step, case_params; 3: the parallel layout one `layout` value
# Whole numbers a store can hold (a signed 64-bit SQL integer) and a worker can allocate; larger is a typo.
MAX_COUNT = 2**31 - 1


class SpecError(ValueError):
    """A spec value that cannot be run; the message says how to fix it."""


# A framework release as pip spells one (PEP 440's characters): 2.13.0, 0.10.1, 2.0rc1, 2.13.0+cpu.
_RELEASE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]{0,63}$", re.ASCII)


def check_release(release: str) -> str:
    """The release unchanged if pip could name it (starts with a digit: 2.13.0, 0.10.1, 2.0rc1), else a SpecError."""
    if not _RELEASE.match(release):
        raise SpecError(f"a framework release looks like 2.13.0 or 0.10.1 (pip's spelling); got {release!r}")
    return release


def split_release(text: str) -> tuple[str, str | None]:
    """'jax==0.10.1' -> ('jax', '0.10.1'); 'jax' -> ('jax', None): a framework, and the release the point asks for
    (None: whichever its environment holds)."""
    name, sep, release = text.strip().partition("==")
    if not sep:
        if "=" in text:
            raise SpecError(f"a framework's release is written NAME==VERSION (e.g. jax==0.10.1); got {text!r}")
        return name, None
    return name.strip(), check_release(release.strip())


def release_key(release: str) -> tuple[int, Any]:
    """A release's place in order (PEP 440: 0.9.0 < 0.9.0.1 < 0.10.0, 2.0rc1 < 2.0); text pip could not parse sorts
    first. (packaging is imported here, on the controller's side only: a worker never orders releases.)"""
    from packaging.version import InvalidVersion, Version

    try:
        return 1, Version(release)
    except InvalidVersion:
        return 0, release


def release_label(framework: str, release: str | None) -> str:
    """'jax==0.10.1', or 'jax' where no release is asked for: the spelling -f and suites take."""
    return f"{framework}=={release}" if release else framework


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(name: str, value: object, low: int) -> None:
    """A whole number in [low, MAX_COUNT], or a SpecError naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise SpecError(f"{name} must be a whole number from {low} to {MAX_COUNT:,}; got {value!r}")


@dataclass(frozen=True)
class Protocol:
    """How a point is measured: warm-up steps, measured steps, repeats and the statistic over repeats."""

    warmup: int
    steps: int
    repeats: int
    statistic: Statistic
    preset: str = "custom"
    windows: int = 5
    min_time_s: float = 0.0

    def __post_init__(self) -> None:
        _count("warmup", self.warmup, 0)
        _count("steps", self.steps, 1)
        _count("repeats", self.repeats, 1)
        _count("windows", self.windows, 1)
        _choice("statistic", self.statistic, STATISTICS)
        if not _finite(self.min_time_s) or self.min_time_s < 0:
            raise SpecError(f"the minimum measured time must be a finite number of seconds >= 0; got {self.min_time_s}")

    def override(
        self,
        warmup: int | None = None,
        steps: int | None = None,
        repeats: int | None = None,
        statistic: str | None = None,
        min_time_s: float | None = None,
    ) -> Protocol:
        """This protocol with the given fields replaced (None keeps a field)."""
        changes: dict[str, Any] = {
            k: v
            for k, v in dict(
                warmup=warmup, steps=steps, repeats=repeats, statistic=statistic, min_time_s=min_time_s
            ).items()
            if v is not None
        }
        return dataclasses.replace(self, **changes)

    def on(self, device: str) -> Protocol:
        """The protocol as run on a device: on a GPU a preset may ask for a minimum measured time per repeat."""
        if device == "cuda" and self.min_time_s == 0.0 and self.preset in GPU_MIN_TIME_S:
            return dataclasses.replace(self, min_time_s=GPU_MIN_TIME_S[self.preset])
        return self


# The seeds' methodologies (docs/protocol.md, Presets). Warm-up and measured steps are per repeat; the measured steps
# are timed in `windows` windows, synchronised with the device only at each window's two ends.
PRESETS: dict[str, Protocol] = {
    "quick": Protocol(warmup=2, steps=5, repeats=3, statistic="median", preset="quick"),
    "caict": Protocol(warmup=20, steps=100, repeats=3, statistic="mean", preset="caict"),
    "dlperf": Protocol(warmup=20, steps=100, repeats=7, statistic="median", preset="dlperf"),
    "tf_cnn": Protocol(warmup=10, steps=100, repeats=5, statistic="mean", preset="tf_cnn"),
}


# On a GPU a quick point is fast (5 steps of ResNet-50 on an H100 take about half a second): `quick` then raises
# its measured steps until a repeat lasts at least this long. The seeds' presets measure 100 steps as they did.
GPU_MIN_TIME_S: dict[str, float] = {"quick": 2.0}


def preset(name: str) -> Protocol:
    """The named preset, or a SpecError listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*$", re.IGNORECASE | re.ASCII)
_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "KIB": 2**10,
    "M": 10**6,
    "MB": 10**6,
    "MIB": 2**20,
    "G": 10**9,
    "GB": 10**9,
    "GIB": 2**30,
    "T": 10**12,
    "TB": 10**12,
    "TIB": 2**40,
}


def parse_size(text: str) -> int:
    """'8GiB', '512MB', '1000000' -> bytes."""
    m = _SIZE.match(text)
    unit = m.group(2).upper() if m else ""
    if not m or unit not in _UNITS:
        raise SpecError(f"memory size must look like 8GiB or 512MB; got {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


_COUNT = re.compile(r"^(\d+(?:\.\d+)?)([KMG]?)$", re.IGNORECASE | re.ASCII)
_COUNT_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_count(text: str, name: str) -> int:
    """'3.2M' -> 3200000 ('K', 'M', 'G' decimal suffixes), for a case parameter `name`; a SpecError unless a
    whole number >= 0 (the case checks its own range)."""
    m = _COUNT.match(str(text).strip())
    value = Decimal(m.group(1)) * _COUNT_SUFFIX[m.group(2).upper()] if m else Decimal(0)
    if not m or value != value.to_integral_value():
        raise SpecError(
            f"--param {name}: a value is a whole number, optionally with K, M or G (e.g. 3.2M), or max; got {text!r}"
        )
    return int(value)


_SCALE = re.compile(r"^(\d+)n(\d+)[cgd]$", re.ASCII)


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
    sync_every_step: bool = False
    case_params: tuple[tuple[str, int], ...] = ()
    layout: Layout = field(default_factory=Layout)  # every parallel dimension and option (dlbench.parallel)
    converge: bool = False  # train learnable data to a target first, keeping the loss curve (#34)
    converge_steps: int | None = None  # the step budget of --converge (None: the case's own)
    converge_target: float | None = None  # the target loss of --converge (None: the case's own)
    release: str | None = None  # the framework release asked for (jax==0.10.1: its versioned environment, #49)
    converge_reference: str = "shipped"  # judged against the shipped reference points, or 'local' runs (#44)
    version: int = field(default=SPEC_VERSION)

    def __post_init__(self) -> None:
        if not self.framework:
            raise SpecError("framework must be named")
        if "=" in self.framework:
            raise SpecError(f"framework {self.framework!r}: its release goes in `release`, not in the name")
        if self.release is not None:
            check_release(self.release)
        if not self.model:
            raise SpecError("model must be named")
        _count("batch size", self.batch_size, 1)
        _choice("precision", self.precision, PRECISIONS)
        _choice("device", self.device, DEVICES)
        _choice("data", self.data, DATA_SOURCES)
        _choice("strategy", self.strategy, STRATEGIES)
        if self.data == "real" and not self.data_dir:
            raise SpecError("real data needs a data folder: make one with `dlbench data imagenet` and pass --data-dir")
        if self.input_size is not None:
            _count("input size", self.input_size, 1)
        _count("nodes", self.nodes, 1)
        _count("devices per node", self.devices_per_node, 1)
        if not _finite(self.timeout_s) or self.timeout_s <= 0:
            raise SpecError(f"timeout must be a finite number of seconds > 0; got {self.timeout_s}")
        if self.memory_limit_bytes is not None and (
            not isinstance(self.memory_limit_bytes, int) or self.memory_limit_bytes <= 0
        ):
            raise SpecError(f"memory limit must be a whole number of bytes > 0; got {self.memory_limit_bytes!r}")
        _count("loader workers", self.loader_workers, 0)
        if self.threads is not None:
            _count("threads", self.threads, 1)
        _count("seed", self.seed, 0)
        _choice("converge reference", self.converge_reference, CONVERGE_REFERENCES)
        for name, value in self.case_params:
            _count(f"case parameter {name}", value, 0)  # its case checks its own range (Case.configured)
        if list(self.case_params) != sorted(dict(self.case_params).items()):
            raise SpecError("case parameters must be unique and sorted by name")
        if not isinstance(self.layout, Layout):
            raise SpecError(f"layout must be a parallel layout; got {self.layout!r}")
        problem = self.layout.problem(self.world_size, self.batch_size)
        if problem:
            raise SpecError(problem)
        object.__setattr__(self, "layout", self.layout.on(self.world_size))  # its data parallel: derived
        if self.layout.bucket_mb is not None and self.strategy not in BUCKET_STRATEGIES:
            raise SpecError(
                f"--bucket-mb sets the gradient bucket size of {', '.join(BUCKET_STRATEGIES)}; "
                f"strategy {self.strategy} has no buckets"
            )

    @property
    def framework_label(self) -> str:
        """'jax==0.10.1' for a point that asks for a release, else 'jax'."""
        return release_label(self.framework, self.release)

    @property
    def world_size(self) -> int:
        """Number of devices across all nodes."""
        return self.nodes * self.devices_per_node

    @property
    def processes(self) -> int:
        """Worker processes the point runs: one per device, or one for a single-process strategy."""
        pair = (self.framework, self.strategy)
        single = self.strategy in SINGLE_PROCESS_STRATEGIES and pair not in PROCESS_PER_DEVICE
        return 1 if single or pair in COORDINATED else self.world_size

    @property
    def servers(self) -> int:
        """Parameter-server processes started beside the workers (0 for most strategies)."""
        if self.world_size == 1:
            return 0
        return next(
            (n + k * self.world_size for fw, s, n, k in SERVER_PROCESSES if (fw, s) == (self.framework, self.strategy)),
            0,
        )

    @property
    def global_batch(self) -> int:
        """Samples per step across all devices: per-device batch x world size, where the batch of a split model
        (tensor or pipeline parallel) is its data-parallel replica's: x devices / (T x P)."""
        return self.batch_size * self.layout.data

    @property
    def scale(self) -> str:
        """The seeds' notation, e.g. 1n1c."""
        return f"{self.nodes}n{self.devices_per_node}c"

    @property
    def params(self) -> dict[str, int]:
        """The case parameters this point sets (vocabulary size, classes ...), by name."""
        return dict(self.case_params)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (the layout's data parallel left out: the devices and the layout say it)."""
        d = dataclasses.asdict(self)
        d["layout"].pop("data")
        return d

    def to_json(self) -> str:
        """Canonical JSON (sorted keys), stable enough to identify a point."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def key(self) -> str:
        """Identity of the configuration (timeout and protocol excluded), used to resume and to match points.

        Fields added after version 1 are left out while they hold their default, so that a point stored before
        they existed keeps its key.
        """
        d = self.to_dict()
        for k in ("timeout_s", "version", "protocol"):
            d.pop(k)
        layout = d.pop("layout")
        assert isinstance(layout, dict)
        d.update({_FLAT_NAMES.get(str(k), str(k)): v for k, v in layout.items()})  # as version 2 stored them: keys kept
        for k, default in _LATER_FIELDS.items():
            if d.get(k) == default:
                d.pop(k)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> PointSpec:
        """Rebuild from to_dict() output; unknown keys are an error, missing ones take defaults."""
        d = nested(d)
        proto = d.pop("protocol")
        if not isinstance(proto, dict):
            raise SpecError("spec.protocol must be an object")
        layout = d.pop("layout", {})
        if not isinstance(layout, dict):
            raise SpecError("spec.layout must be an object")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        if "case_params" in d:
            d["case_params"] = tuple((str(k), v) for k, v in d["case_params"])  # type: ignore[attr-defined]
        try:
            return cls(protocol=Protocol(**proto), layout=Layout(**layout), **d)  # type: ignore[arg-type]
        except TypeError as exc:
            raise SpecError(f"malformed spec: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> PointSpec:
        """Rebuild from to_json() output."""
        return cls.from_dict(json.loads(text))


# Spec fields added after version 1, with the default that leaves them out of a point's key.
_LATER_FIELDS: dict[str, object] = {"sync_every_step": False, "case_params": ()}
_LATER_FIELDS.update(
    tensor_parallel=1, pipeline_parallel=1, micro_batches=1, pipeline_schedule="1f1b", recompute=False
)  # the parallel layout (#23)
_LATER_FIELDS["bucket_mb"] = None  # DDP's bucket size (#22)
_LATER_FIELDS.update(fsdp=False, context_parallel=1)  # FSDP2 and context parallel (#35)
_LATER_FIELDS.update(expert_parallel=1, routing="learned")  # expert parallel and forced routing (#36)
_LATER_FIELDS.update(converge=False, converge_steps=None, converge_target=None)  # convergence runs (#34)
_LATER_FIELDS["release"] = None  # a framework release asked for (#49)
_LATER_FIELDS["converge_reference"] = "shipped"  # what a convergence run is judged against (#44)
# A layout option's name where version 2 kept it flat on the spec under another name (the key still uses it).
_FLAT_NAMES: dict[str, str] = {"schedule": "pipeline_schedule"}
# A new layout option joins the key while it differs from its default (a point stored before it keeps its key).
_LATER_FIELDS.update(
    {_FLAT_NAMES.get(f.name, f.name): f.default for f in option_fields() if f.name not in _LATER_FIELDS}
)


def nested(d: dict[str, object]) -> dict[str, object]:
    """A stored spec in this version's form: version 2 kept the layout's options flat on the spec (as the key still
    names them); they move into its `layout`. Anything else is left as it is."""
    flat = {_FLAT_NAMES.get(f.name, f.name): f.name for f in option_fields()}
    moved = {flat[k]: v for k, v in d.items() if k in flat}
    if not moved:
        return dict(d)
    layout = d.get("layout", {})
    if not isinstance(layout, dict):
        raise SpecError("spec.layout must be an object")
    return {**{k: v for k, v in d.items() if k not in flat}, "layout": {**layout, **moved}}
