"""Measure stored points again, here, through the run API's gate (runapi/gate.py: the refusals, bounds and
--force every path shares): `dlbench rerun RUN` (every distinct spec of a run, into a run of kind `rerun`) and
`dlbench reproduce POINT_OR_RUN --run` (after checking that this environment may: its framework installed, at the
version that made the point, unless forced; a run of kind `reproduce`); each compared with the original through
analysis/compare.py. The commands are thin layers over `rerun` and `measure_again`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dlbench.analysis.compare import MIN_EFFECT, Comparison, compare_runs
from dlbench.analysis.reproduce import NotReproducible, Target, specs_of, version_refusal
from dlbench.backends import get_info
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.lock import package_lock
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.launch.session import PointDone, PointStarted, run_points
from dlbench.records import PointResult
from dlbench.runapi.gate import admit
from dlbench.spec import PointSpec, SpecError
from dlbench.store.request import normalise, request_of
from dlbench.store.store import Store

REPRODUCE_KIND = "reproduce"
RERUN_KIND = "rerun"


class RunProgressSink(Protocol):
    """What shows a rerun's progress (the command's progress bar)."""

    def started(self, index: int, spec: PointSpec) -> ProgressSink | None:
        """A point started; the sink its progress events go to."""

    def done(self, index: int, result: PointResult) -> None:
        """A point ended, stored."""


@dataclass(frozen=True)
class Readiness:
    """What measuring the target here overrides (``forced``, '' for nothing) and what the user should know."""

    forced: str
    notes: tuple[str, ...]


def check_environment(target: Target, force: bool) -> Readiness:
    """Whether this environment may measure the target again; NotReproducible (one line) where its framework's
    environment exists no more, or the framework's version here differs from the one that made it and not force."""
    refusals: list[str] = []
    notes: list[str] = []
    for r in specs_of(target):
        fw = r.spec.framework
        req = request_of(r)
        try:
            python = interpreter_for(fw, r.spec.release)
        except NotInstalled as exc:
            was = f" ({req.python})" if req is not None and req.python else ""
            raise NotReproducible(
                f"the environment that ran {fw}{was} no longer exists here: {exc}; "
                f"`--env-file` writes the lock to rebuild it"
            ) from None
        if req is not None and req.python and req.python != python:
            state = "no longer exists" if not Path(req.python).exists() else "is not the one dlbench uses now"
            notes.append(f"{fw} ran in {req.python}, which {state}: measuring with {python}")
        dist = get_info(fw).distribution
        here = next((v for n, v in package_lock(python)[1] if normalise(n) == normalise(dist)), None)
        why = version_refusal(r, fw, dist, here)
        if why and why not in refusals:
            refusals.append(why)
    if refusals and not force:
        raise NotReproducible(refusals[0])
    return Readiness("; ".join(w.split(": install")[0] for w in refusals) if force else "", tuple(notes))


def gate(specs: Sequence[PointSpec], force: bool) -> Launchers:
    """The launchers that measure stored points again here, once every point has passed the gate that `run` passes
    (refusals, launchers, a GPU, bounds unless forced, its framework installed): a one-line refusal before
    anything is written."""
    launchers = Launchers.build(HostsConfig.from_options(None, None, None, 300.0))
    admit(specs, launchers, force)
    return launchers


def measure_again(
    store: Store,
    target: Target,
    command: str,
    ready: Readiness,
    min_effect: float = MIN_EFFECT,
    force: bool = False,
    progress: Callable[[int], AbstractContextManager[RunProgressSink | None]] = lambda total: nullcontext(),
) -> tuple[Comparison, str]:
    """Measure the target's distinct configurations again into a new run (its meta names the original and what
    was forced, which each new point's request records); the comparison with the original, and the new run's id.
    Every point passes the gate first (`force`: past the bounds), before `progress` shows anything."""
    specs = [r.spec for r in specs_of(target)]
    launchers = gate(specs, force)
    meta = {"reproduce_of": target.point.uid if target.point else target.run.id, "forced": ready.forced}
    with progress(len(specs)) as ui:
        started, done = (ui.started, ui.done) if ui else (None, None)
        new_id = _measure(
            store, command, REPRODUCE_KIND, {**meta, "points": len(specs)}, specs, launchers, started, done
        )
    return compare_runs(target.run.id, list(target.points), new_id, store.points([new_id]), min_effect), new_id


def distinct_specs(store: Store, run_id: str) -> list[PointSpec]:
    """The distinct specs of a run's points, in the order they were measured."""
    seen: dict[str, PointSpec] = {}
    for p in store.points([run_id]):
        seen.setdefault(p.result.spec.to_json(), p.result.spec)
    return list(seen.values())


@dataclass(frozen=True)
class Rerun:
    """A run measured again: the original's id, the new run's, what the new points ended as, and the comparison."""

    original: str
    new_id: str
    results: tuple[PointResult, ...]
    comparison: Comparison
    configurations: int


def rerun(
    store: Store,
    run_id: str,
    command: str,
    force: bool = False,
    min_effect: float = MIN_EFFECT,
    progress: Callable[[int], AbstractContextManager[RunProgressSink | None]] = lambda total: nullcontext(),
) -> Rerun:
    """Measure a stored run's distinct configurations again into a new run of kind `rerun` and compare it with the
    original; every point passes the gate first (`force`: past the bounds)."""
    original = store.get_run(run_id)
    specs = distinct_specs(store, original.id)
    if not specs:
        raise SpecError(f"run {original.id} has no points, so no configuration to measure again")
    launchers = gate(specs, force)
    meta = {"rerun_of": original.id, "points": len(specs)}
    with progress(len(specs)) as ui:
        started, done = (ui.started, ui.done) if ui else (None, None)
        new_id = _measure(store, command, RERUN_KIND, meta, specs, launchers, started, done)
    new = store.points([new_id])
    c = compare_runs(original.id, store.points([original.id]), new_id, new, min_effect=min_effect)
    return Rerun(original.id, new_id, tuple(p.result for p in new), c, len(specs))


def _measure(
    store: Store,
    command: str,
    kind: str,
    meta: dict[str, object],
    specs: Sequence[PointSpec],
    launchers: Launchers,
    started: PointStarted | None,
    done: PointDone | None,
) -> str:
    """Run the specs into a new run of this kind; its id (Ctrl-C marks it interrupted and propagates)."""
    new_id = store.create_run(command, kind=kind, meta=meta)
    try:
        run_points(store, new_id, specs, launchers, started=started, done=done)
    except KeyboardInterrupt:
        store.finish_run(new_id, "interrupted")
        raise
    store.finish_run(new_id, "done")
    return new_id
