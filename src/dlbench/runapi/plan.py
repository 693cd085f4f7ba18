"""`dlbench run --dry-run`: the points a run request makes, each with its memory estimate per device, the memory
it would get here, and what would refuse it; nothing is run, nothing written (#41). `sweep --dry-run` lists a
suite's points the same way. This is also how to ask whether a model fits a device:
`dlbench run --dry-run -m llama3_8b --fsdp --scale 1n8g --device cuda`. Each point passes the gate's rules one by
one (runapi/gate.py), so that every reason shows, not only the first point's."""

from __future__ import annotations

from collections.abc import Callable

from dlbench.analysis.memory import estimate
from dlbench.cases import get_case
from dlbench.data.layout import check_data_dir
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.launch.bounds import bound_problem, gpu_sharing_problem
from dlbench.launch.fits import PlannedPoint, limit_for, memory_problem
from dlbench.launch.registry import Launchers
from dlbench.points import points
from dlbench.refusals import refusal
from dlbench.runapi.gate import require_gpu
from dlbench.runapi.run import RunRequest
from dlbench.spec import PointSpec, SpecError


def plan_run(req: RunRequest) -> tuple[PlannedPoint, ...]:
    """Every point the request makes and what would refuse it (bad input still fails, as a run's would)."""
    specs = points(req.axes, req.shared)
    for spec in specs:
        check_data_dir(spec, get_case(spec.model))
    launchers = Launchers.build(req.hosts)
    remote = bool(launchers.config.hosts)
    out = []
    for spec in specs:
        found, limit = estimate(spec), limit_for(spec, remote)
        elsewhere = remote or spec.launcher == "slurm"
        why = (
            refusal(spec)
            or _said(launchers.check, spec)
            or _said(lambda s: require_gpu([s], remote), spec)
            or gpu_sharing_problem(spec, elsewhere)
            or (None if req.force else bound_problem(spec, elsewhere))
            or (None if req.force else memory_problem(spec, found, limit))
            or _said(lambda s: interpreter_for(s.framework), spec)
        )
        out.append(PlannedPoint(spec, found, limit, why))
    return tuple(out)


def _said(check: Callable[[PointSpec], object], spec: PointSpec) -> str | None:
    """The one-line refusal a gate check raises for the point, or None."""
    try:
        check(spec)
    except (SpecError, NotInstalled) as exc:
        return str(exc)
    return None


__all__ = ["plan_run"]
