"""The one builder of benchmark points: typed axes in, frozen PointSpecs out. `dlbench run` (its request's axes),
suites (suite/expand.py, one combination at a time) and the worker-side checks all build their points here, so
the default batch, the launcher a point gets, and the checks of its case parameters and input size are written
once. Framework-free: it reads the case registry and the backends' light registry, never a framework.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from dlbench.analysis.references import with_budget
from dlbench.backends import get_info
from dlbench.cases import Case, get_case
from dlbench.parallel import Layout
from dlbench.spec import PRESETS, DataSource, Device, PointSpec, Precision, Protocol, SpecError, split_release

DEFAULT_MODELS: tuple[str, ...] = ("resnet50", "bert_base")


@dataclass(frozen=True)
class Shared:
    """What every point of a request shares: how it is measured, on what device, with which options and layout,
    where it runs (launcher None: `local` on one device, the framework's preferred engine on several)."""

    protocol: Protocol = PRESETS["quick"]
    device: Device = "cpu"
    compile: bool = False
    channels_last: bool = False
    data: DataSource = "synthetic"
    data_dir: str | None = None
    loader_workers: int = 2
    input_size: int | None = None
    nodes: int = 1
    devices_per_node: int = 1
    strategy: str = "none"
    launcher: str | None = None
    timeout_s: float = 1800.0
    memory_limit_bytes: int | None = None
    threads: int | None = None
    sync_every_step: bool = False
    layout: Layout = field(default_factory=Layout)
    converge: bool = False  # train learnable data to a target first (#34); steps and target None: the case's own
    converge_steps: int | None = None
    converge_target: float | None = None
    converge_runs: int = 1  # runs per convergence configuration, seeds seed .. seed + N - 1 (#44)
    converge_reference: str = "shipped"  # judged against the shipped reference points, or 'local' runs
    seed: int = 0  # the initialisation and, for --converge, the stream of examples

    def __post_init__(self) -> None:
        if not self.converge and (self.converge_steps is not None or self.converge_target is not None):
            given = "--converge-target" if self.converge_target is not None else "--converge-steps"
            raise SpecError(f"{given} applies to --converge: add --converge, or drop {given}")


@dataclass(frozen=True)
class Axes:
    """The axes whose product is a request's points: frameworks x models x precisions x case-parameter values x
    batch sizes (none given: each case's default on the device). A framework may name its release (jax==0.10.1:
    its versioned environment). A parameter `searched` (NAME=max) starts at its search floor; the max search finds
    its value."""

    frameworks: tuple[str, ...] = ("torch",)
    models: tuple[str, ...] = DEFAULT_MODELS
    precisions: tuple[Precision, ...] = ("fp32",)
    batches: tuple[int, ...] = ()
    params: tuple[Mapping[str, int], ...] = ({},)
    searched: str | None = None


def default_batch(case: Case, device: str, micro_batches: int = 1) -> int:
    """A case's batch when none is given: its CPU size on the CPU, its fixed seed size on a GPU, rounded up to whole
    micro-batches."""
    batch = case.batch_cpu if device == "cpu" else case.batch_fixed
    return -(-batch // micro_batches) * micro_batches


def default_launcher(framework: str, devices: int) -> str:
    """`local` for one device; for several, the engine the framework's backend prefers."""
    return get_info(framework).engine if devices > 1 else "local"


def param_bounds(case: Case, name: str) -> tuple[int, int, int]:
    """(lo, hi, unit) of a searchable case parameter; a SpecError when the case cannot search it."""
    declared = {p.name: p for p in case.params}
    if name not in declared:
        have = ", ".join(sorted(declared)) or "none"
        raise SpecError(f"case {case.name} has no parameter {name}: it declares {have}")
    if declared[name].search is None:
        raise SpecError(f"case {case.name}: {name} cannot be searched (max); give its values")
    return declared[name].search  # type: ignore[return-value]


def search_floor(case: Case, name: str) -> int:
    """The value a searched parameter's point holds until the search has run: its lower bound."""
    return param_bounds(case, name)[0]


def point(
    framework: str,
    model: str | Case,
    batch: int | None,
    precision: Precision,
    shared: Shared,
    params: Mapping[str, int] | None = None,
) -> PointSpec:
    """One point: the case's parameters (a name it does not declare, a value it refuses) and the input size it can
    take are checked, the batch defaults to the case's (None), the launcher to the one for its devices; the spec
    checks itself (SpecError, one line). `framework` may name a release (jax==0.10.1). The only place a PointSpec is
    made from its parts."""
    name, release = split_release(framework)
    get_info(name)  # an unknown framework: one line naming the known ones
    case = model if isinstance(model, Case) else get_case(model)
    values = dict(params or {})
    case.configured(values).check_input_size(shared.input_size)
    devices = shared.nodes * shared.devices_per_node
    spec = PointSpec(
        framework=name,
        model=case.name,
        batch_size=default_batch(case, shared.device, shared.layout.micro_batches) if batch is None else batch,
        protocol=shared.protocol,
        precision=precision,
        compile=shared.compile,
        channels_last=shared.channels_last,
        device=shared.device,
        data=shared.data,
        data_dir=shared.data_dir,
        loader_workers=shared.loader_workers,
        input_size=shared.input_size,
        nodes=shared.nodes,
        devices_per_node=shared.devices_per_node,
        strategy=shared.strategy,
        launcher=shared.launcher or default_launcher(name, devices),
        timeout_s=shared.timeout_s,
        memory_limit_bytes=shared.memory_limit_bytes,
        threads=shared.threads,
        sync_every_step=shared.sync_every_step,
        case_params=tuple(sorted(values.items())),
        layout=shared.layout,
        converge=shared.converge,
        converge_steps=shared.converge_steps if shared.converge else None,
        converge_target=shared.converge_target if shared.converge else None,
        release=release,
        converge_reference=shared.converge_reference if shared.converge else "shipped",
        seed=shared.seed,
    )
    return with_budget(spec)  # a convergence budget that could never read `slower` is raised (#44)


def points(axes: Axes, shared: Shared) -> list[PointSpec]:
    """Every combination of the axes, validated before anything runs, batch innermost."""
    out: list[PointSpec] = []
    for fw, name, precision, values in itertools.product(axes.frameworks, axes.models, axes.precisions, axes.params):
        case = get_case(name)
        chosen = {**values, axes.searched: search_floor(case, axes.searched)} if axes.searched else dict(values)
        for batch in axes.batches or (None,):
            out += with_runs(point(fw, case, batch, precision, shared, chosen), shared)
    return out


def with_runs(spec: PointSpec, shared: Shared) -> list[PointSpec]:
    """A convergence point once per run (--converge-runs N: seeds seed .. seed + N - 1, judged together); any other
    point once."""
    runs = shared.converge_runs if shared.converge else 1
    return [spec] + [dataclasses.replace(spec, seed=spec.seed + i) for i in range(1, runs)]


__all__ = [
    "DEFAULT_MODELS",
    "Axes",
    "Shared",
    "default_batch",
    "default_launcher",
    "param_bounds",
    "point",
    "points",
    "search_floor",
    "with_runs",
]
