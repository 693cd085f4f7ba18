"""Measure a stored point (or run) again, here: check that this environment may (its framework is installed, at
the version that made the point, unless forced), run its exact stored specs into a new run of kind `reproduce`,
and compare the two with analysis/compare.py. `dlbench reproduce --run` is a thin layer over `measure_again`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlbench.analysis.compare import MIN_EFFECT, Comparison, compare_runs
from dlbench.analysis.reproduce import NotReproducible, Target, specs_of, version_refusal
from dlbench.backends import get_info
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.lock import package_lock
from dlbench.launch.registry import Launchers
from dlbench.launch.session import PointDone, PointStarted, run_points
from dlbench.store.request import normalise, request_of
from dlbench.store.store import Store

REPRODUCE_KIND = "reproduce"


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
            python = interpreter_for(fw)
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


def measure_again(
    store: Store,
    target: Target,
    command: str,
    ready: Readiness,
    min_effect: float = MIN_EFFECT,
    started: PointStarted | None = None,
    done: PointDone | None = None,
) -> tuple[Comparison, str]:
    """Measure the target's distinct configurations again into a new run (its meta names the original and what
    was forced, which each new point's request records); the comparison with the original, and the new run's id."""
    specs = [r.spec for r in specs_of(target)]
    launchers = Launchers.build(HostsConfig.from_options(None, None, None, 300.0))
    for s in specs:
        launchers.check(s)
    new_id = store.create_run(
        command,
        kind=REPRODUCE_KIND,
        meta={
            "reproduce_of": target.point.uid if target.point else target.run.id,
            "forced": ready.forced,
            "points": len(specs),
        },
    )
    try:
        run_points(store, new_id, specs, launchers, started=started, done=done)
    except KeyboardInterrupt:
        store.finish_run(new_id, "interrupted")
        raise
    store.finish_run(new_id, "done")
    return compare_runs(target.run.id, list(target.points), new_id, store.points([new_id]), min_effect), new_id
