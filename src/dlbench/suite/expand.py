"""A suite's points: the product of its axes, less its exclusions, as PointSpecs (a `max` batch found later)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from dlbench.backends import all_backends
from dlbench.cases import Case, ImageInput, get_case
from dlbench.envs.interpreters import installed
from dlbench.parallel import Layout
from dlbench.points import Shared, default_batch, point, search_floor, with_runs
from dlbench.spec import PointSpec, Precision, Protocol, parse_scale, parse_size, preset
from dlbench.suite.schema import AXES, Suite, SuiteError


@dataclass(frozen=True)
class PlannedPoint:
    """One point of a suite: its spec and its batch group (min, fixed, max or the number as written).

    For the max group the spec's batch size is the search's lower bound until the search has run.
    """

    spec: PointSpec
    batch_group: str
    param_search: str | None = None  # a case parameter still to be found by the max search (suite params: max)

    @property
    def needs_search(self) -> bool:
        """Whether the batch size is still to be found by the max-batch search."""
        return self.batch_group == "max"

    def with_batch(self, batch: int) -> PlannedPoint:
        """The same point at a found batch size."""
        return dataclasses.replace(self, spec=dataclasses.replace(self.spec, batch_size=batch))


def suite_protocol(suite: Suite) -> Protocol:
    """The suite's preset with its overrides."""
    p = suite.protocol
    return preset(p.preset).override(warmup=p.warmup, steps=p.steps, repeats=p.repeats, statistic=p.statistic)


def frameworks(names: list[str], versions: Mapping[str, list[str]] | None = None) -> list[str]:
    """Expand 'installed' (every registered backend installed here) and 'all' (every registered backend), and each
    framework with releases in `versions` into one name per release (jax -> jax==0.10.1, jax==0.10.2)."""
    out: list[str] = []
    for name in names:
        if name == "installed":
            expanded = [b for b, info in all_backends().items() if not info.unavailable and installed(b)]
        elif name == "all":
            expanded = list(all_backends())
        else:
            expanded = [name]
        for f in expanded:
            out += [r for r in [f"{f}=={v}" for v in (versions or {}).get(f, [])] or [f] if r not in out]
    return out


def expand(
    suite: Suite, device: str, data_dir: str | None = None, only: dict[str, list[str]] | None = None
) -> list[PlannedPoint]:
    """Every point of the suite on this device, in axis order, batch innermost; excluded points are left out.

    only restricts axes to the given values (as written in a suite, compared as text), e.g. {"scale": ["1n1c"]}.
    """
    axes = suite.axes
    values: dict[str, list[object]] = {a: list(getattr(axes, a)) for a in AXES}
    values["framework"] = list(frameworks(axes.framework, axes.versions))
    for axis, wanted in (only or {}).items():
        if axis not in AXES:
            raise SuiteError(f"--only names an unknown axis {axis!r}; axes: {', '.join(AXES)}")
        layouts = axis == "scale" and suite.layouts
        known = [e.scale for e in suite.layouts] if layouts else [_text(v) for v in values[axis]]
        if axis == "framework":  # `jax` picks every release of it on the axis
            known += [k.partition("==")[0] for k in known]
        unknown = [w for w in wanted if w not in known]
        if unknown:  # named, not "no point left"
            raise SuiteError(
                f"--only {axis}={unknown[0]!r} matches none of suite {suite.name}'s {axis} values "
                f"({', '.join(dict.fromkeys(known)) or 'none'})"
            )
        if axis == "scale" and suite.layouts:
            continue  # each layout has its scale (_with_layouts)
        values[axis] = [v for v in values[axis] if _text(v) in wanted or _named(axis, v, wanted)]
    points: list[PlannedPoint] = []
    order = ("framework", "model", "precision", "compile", "data", "scale", "strategy", "batch")
    for combo in itertools.product(*(values[a] for a in order)):
        cell = dict(zip(order, combo))
        if not suite.layouts and _excluded(suite, cell):  # with layouts: once the layout is known
            continue
        case = get_case(str(cell["model"]))
        for scale, batch, group, layout, entry_params in _placements(suite, cell, device, case, only or {}):
            shared = _shared(suite, cell, device, case, scale, layout, data_dir)
            for values_, searched in _param_sets(suite, case):
                precision = cast(Precision, cell["precision"])
                spec = point(str(cell["framework"]), case, batch, precision, shared, {**entry_params, **values_})
                points += [PlannedPoint(s, group, searched) for s in with_runs(spec, shared)]
    return points


def _excluded(suite: Suite, point: dict[str, object]) -> bool:
    return any(rule.matches(point) for rule in suite.exclude)


Placement = tuple[str, int, str, Layout, dict[str, int]]  # scale, batch, batch group, layout, parameters


def _placements(
    suite: Suite, cell: dict[str, object], device: str, case: Case, only: dict[str, list[str]]
) -> list[Placement]:
    """Where and at what batch a cell of the axes runs: once per named layout of the suite that runs its model
    (its scale, batch, layout options and parameters; the layout's name is its batch group), less those an
    exclusion matches (on the axes, the layout's scale and its name), or at the cell's own scale and batch when
    the suite names none.
    --only scale=... picks layouts too."""
    if not suite.layouts:
        layout = suite.layout.over(suite.layout)
        return [
            (str(cell["scale"]), _batch(suite, cell["batch"], case, device, layout), str(cell["batch"]), layout, {})
        ]
    out = []
    for e in suite.layouts:
        if "scale" in only and e.scale not in only["scale"]:
            continue
        if e.model is not None and cell["model"] not in e.model:  # a layout for some models only
            continue
        if _excluded(suite, {**cell, "scale": e.scale, "layout": e.name}):
            continue
        out.append((e.scale, e.batch, e.name, e.over(suite.layout), dict(e.params)))
    return out


def _batch(suite: Suite, word: object, case: Case, device: str, layout: Layout) -> int:
    """The per-device batch a batch axis value means: min 1, fixed the case's default on the device, max the
    search's lower bound (until the search has run), or the number as written."""
    if word == "min":
        return 1
    if word == "fixed":
        return default_batch(case, device, layout.micro_batches)
    if word == "max":
        return suite.max_batch.lo
    return int(word)  # type: ignore[call-overload]


def _param_sets(suite: Suite, case: Case) -> list[tuple[dict[str, int], str | None]]:
    """Each combination of the suite's case parameters the case declares, with the one at max (searched) set to its
    search floor and named."""
    declared = {p.name for p in case.params}
    lists = {n: v for n, v in suite.params.items() if n in declared and isinstance(v, list)}
    searched = next((n for n, v in suite.params.items() if n in declared and v == "max"), None)
    out = []
    for combo in itertools.product(*lists.values()):
        values = dict(zip(lists, combo))
        if searched is not None:
            values[searched] = search_floor(case, searched)
        out.append((values, searched))
    return out


def _named(axis: str, value: object, wanted: list[str]) -> bool:
    """Whether a framework axis value is a release of a framework named in `wanted` (jax for jax==0.10.1)."""
    return axis == "framework" and "==" in str(value) and str(value).partition("==")[0] in wanted


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _channels_last(suite: Suite, framework: str, case: Case) -> bool:
    """Whether a point runs NHWC: the suite asks for it (for all frameworks, or for those it lists), and the case
    takes images (a text model has no channels)."""
    name = framework.partition("==")[0]  # a release of a framework is that framework
    wanted = suite.channels_last if isinstance(suite.channels_last, bool) else name in suite.channels_last
    return wanted and isinstance(case.input, ImageInput)


def _shared(
    suite: Suite,
    cell: dict[str, object],
    device: str,
    case: Case,
    scale: str,
    layout: Layout,
    data_dir: str | None,
) -> Shared:
    """What a cell's points share, as the suite writes it."""
    nodes, per_node = parse_scale(scale)
    converge = suite.converge
    return Shared(
        protocol=suite_protocol(suite),
        device=device,  # type: ignore[arg-type]
        compile=bool(cell["compile"]),
        channels_last=_channels_last(suite, str(cell["framework"]), case),
        data=cell["data"],  # type: ignore[arg-type]
        data_dir=data_dir if cell["data"] == "real" else None,
        loader_workers=suite.loader_workers,
        input_size=input_size(suite, case),
        nodes=nodes,
        devices_per_node=per_node,
        strategy=str(cell["strategy"]),
        launcher=None if suite.launcher == "auto" else suite.launcher,
        timeout_s=suite.timeout,
        memory_limit_bytes=parse_size(suite.point_memory_limit) if suite.point_memory_limit else None,
        threads=suite.threads,
        sync_every_step=suite.sync_every_step,
        layout=layout,
        converge=converge is not None,  # every point a convergence point, as `run --converge` makes it (#34)
        converge_steps=converge.steps if converge else None,
        converge_target=converge.target if converge else None,
        converge_runs=converge.runs if converge else 1,
        converge_reference=converge.reference if converge else "shipped",
        seed=suite.seed,
    )


def input_size(suite: Suite, case: Case) -> int | None:
    """The suite's input size for a model: one for all, or the model's own where the suite maps them (None:
    the case's native size)."""
    if isinstance(suite.input_size, dict):
        return suite.input_size.get(case.name)
    return suite.input_size


def memory_limit_bytes(suite: Suite, model: str, override: int | None = None) -> int | None:
    """The emulated device budget of max-batch probes on the CPU: --memory-limit (bytes), else the suite's (per
    model)."""
    if override is not None:
        return override
    text = suite.memory_limit
    if isinstance(text, dict):
        text = text.get(get_case(model).name)
    return parse_size(text) if text else None
