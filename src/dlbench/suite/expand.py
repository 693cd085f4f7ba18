"""A suite's points: the product of its axes, less its exclusions, as PointSpecs (a `max` batch found later)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from dlbench.backends import all_backends
from dlbench.cases import Case, ImageInput, get_case
from dlbench.envs.interpreters import installed
from dlbench.launch.registry import Launchers
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol, parse_scale, parse_size, preset
from dlbench.suite.maxbatch import search_floor
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


def frameworks(names: list[str]) -> list[str]:
    """Expand 'installed' (every registered backend installed here) and 'all' (every registered backend)."""
    out: list[str] = []
    for name in names:
        if name == "installed":
            expanded = [b for b, info in all_backends().items() if not info.unavailable and installed(b)]
        elif name == "all":
            expanded = list(all_backends())
        else:
            expanded = [name]
        out += [f for f in expanded if f not in out]
    return out


def expand(
    suite: Suite, device: str, data_dir: str | None = None, only: dict[str, list[str]] | None = None
) -> list[PlannedPoint]:
    """Every point of the suite on this device, in axis order, batch innermost; excluded points are left out.

    only restricts axes to the given values (as written in a suite, compared as text), e.g. {"scale": ["1n1c"]}.
    """
    axes = suite.axes
    values: dict[str, list[object]] = {a: list(getattr(axes, a)) for a in AXES}
    values["framework"] = list(frameworks(axes.framework))
    for axis, wanted in (only or {}).items():
        if axis not in AXES:
            raise SuiteError(f"--only names an unknown axis {axis!r}; axes: {', '.join(AXES)}")
        layouts = axis == "scale" and suite.layouts
        known = [e.scale for e in suite.layouts] if layouts else [_text(v) for v in values[axis]]
        unknown = [w for w in wanted if w not in known]
        if unknown:  # named, not "no point left"
            raise SuiteError(
                f"--only {axis}={unknown[0]!r} matches none of suite {suite.name}'s {axis} values "
                f"({', '.join(dict.fromkeys(known)) or 'none'})"
            )
        if axis == "scale" and suite.layouts:
            continue  # each layout has its scale (_with_layouts)
        values[axis] = [v for v in values[axis] if _text(v) in wanted]
    protocol = suite_protocol(suite)
    points: list[PlannedPoint] = []
    order = ("framework", "model", "precision", "compile", "data", "scale", "strategy", "batch")
    for combo in itertools.product(*(values[a] for a in order)):
        point = dict(zip(order, combo))
        if not suite.layouts and _excluded(suite, point):  # with layouts: once the layout is known
            continue
        planned = _planned(suite, point, device, protocol, data_dir)
        points += [q for p in _with_layouts(suite, planned, point, only or {}) for q in _with_params(suite, p)]
    return points


def _excluded(suite: Suite, point: dict[str, object]) -> bool:
    return any(rule.matches(point) for rule in suite.exclude)


def _with_layouts(
    suite: Suite, point: PlannedPoint, axes: dict[str, object], only: dict[str, list[str]]
) -> list[PlannedPoint]:
    """The point once per named layout of the suite (its scale, batch, split and parameters; the layout's name
    is its batch group), less those an exclusion matches (on the axes, the layout's scale and its name), or the
    point itself when the suite names none. --only scale=... picks layouts too."""
    if not suite.layouts:
        return [point]
    out = []
    for e in suite.layouts:
        if "scale" in only and e.scale not in only["scale"]:
            continue
        if _excluded(suite, {**axes, "scale": e.scale, "layout": e.name}):
            continue
        nodes, per_node = parse_scale(e.scale)
        spec = dataclasses.replace(
            point.spec,
            nodes=nodes,
            devices_per_node=per_node,
            batch_size=e.batch,
            layout=Layout(
                tensor_parallel=e.tensor_parallel,
                pipeline_parallel=e.pipeline_parallel,
                micro_batches=e.micro_batches,
                schedule=e.schedule,
                recompute=e.recompute,
                fsdp=e.fsdp,
                expert_parallel=e.expert_parallel,
                routing=e.routing,
            ),
            case_params=tuple(sorted({**point.spec.params, **e.params}.items())),
        )
        if suite.launcher == "auto":
            spec = dataclasses.replace(spec, launcher=Launchers.default_for(spec))
        out.append(PlannedPoint(spec, e.name))
    return out


def _with_params(suite: Suite, point: PlannedPoint) -> list[PlannedPoint]:
    """The point once per combination of the suite's case parameters its model declares; a parameter at max
    starts at its search floor and is marked for the search."""
    case = get_case(point.spec.model)
    declared = {p.name for p in case.params}
    lists = {n: v for n, v in suite.params.items() if n in declared and isinstance(v, list)}
    searched = next((n for n, v in suite.params.items() if n in declared and v == "max"), None)
    out = []
    for combo in itertools.product(*lists.values()):
        values = dict(zip(lists, combo))
        if searched is not None:
            values[searched] = search_floor(case, searched)
        spec = dataclasses.replace(point.spec, case_params=tuple(sorted({**point.spec.params, **values}.items())))
        out.append(dataclasses.replace(point, spec=spec, param_search=searched))
    return out


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _channels_last(suite: Suite, framework: str, case: Case) -> bool:
    """Whether a point runs NHWC: the suite asks for it (for all frameworks, or for those it lists), and the case
    takes images (a text model has no channels)."""
    wanted = suite.channels_last if isinstance(suite.channels_last, bool) else framework in suite.channels_last
    return wanted and isinstance(case.input, ImageInput)


def _planned(
    suite: Suite, point: dict[str, object], device: str, protocol: Protocol, data_dir: str | None
) -> PlannedPoint:
    case = get_case(str(point["model"]))
    in_size = input_size(suite, case)
    case.check_input_size(in_size)  # smaller than the architecture takes: SpecError
    batch = point["batch"]
    group = str(batch)
    if batch == "min":
        size = 1
    elif batch == "fixed":
        size = case.batch_cpu if device == "cpu" else case.batch_fixed
    elif batch == "max":
        size = suite.max_batch.lo
    else:
        size = int(batch)  # type: ignore[call-overload]
    nodes, per_node = parse_scale(str(point["scale"]))
    real = point["data"] == "real"
    spec = PointSpec(
        framework=str(point["framework"]),
        model=case.name,
        batch_size=size,
        protocol=protocol,
        precision=point["precision"],  # type: ignore[arg-type]
        compile=bool(point["compile"]),
        channels_last=_channels_last(suite, str(point["framework"]), case),
        device=device,  # type: ignore[arg-type]
        data=point["data"],  # type: ignore[arg-type]
        data_dir=data_dir if real else None,
        loader_workers=suite.loader_workers,
        input_size=in_size,
        nodes=nodes,
        devices_per_node=per_node,
        strategy=str(point["strategy"]),
        launcher="local" if suite.launcher == "auto" else suite.launcher,
        timeout_s=suite.timeout,
        threads=suite.threads,
    )
    if suite.converge is not None:  # every point a convergence point, as `run --converge` makes it (#34)
        spec = dataclasses.replace(
            spec, converge=True, converge_steps=suite.converge.steps, converge_target=suite.converge.target
        )
    if suite.launcher == "auto":
        spec = dataclasses.replace(spec, launcher=Launchers.default_for(spec))
    return PlannedPoint(spec, group)


def input_size(suite: Suite, case: Case) -> int | None:
    """The suite's input size for a model: one for all, or the model's own where the suite maps them (None:
    the case's native size)."""
    if isinstance(suite.input_size, dict):
        return suite.input_size.get(case.name)
    return suite.input_size


def memory_limit_bytes(suite: Suite, model: str, override: str | None = None) -> int | None:
    """The emulated device budget of max-batch probes on the CPU: --memory-limit, else the suite's (per model)."""
    text = override or suite.memory_limit
    if isinstance(text, dict):
        text = text.get(get_case(model).name)
    return parse_size(text) if text else None
