"""The run API under `dlbench bisect` (#49): one configuration of one framework, measured at the releases the
halving visits (analysis/bisect.py), each through the same gate as `run` (runapi/gate.py: refusals, launchers,
bounds and --force, an installed release) and stored as it ends in one run of kind "bisect". A release measured
before (the same configuration and protocol, status ok, in the store) is read, not measured again.

The releases come from the environments set up (`dlbench setup jax==X`, and the default one's release), from the
package index (`pip index versions`, asked now; nothing is downloaded), or from the list given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from dlbench.analysis.bisect import Bisection, CannotMeasure, Probe, bisect
from dlbench.analysis.compare import MIN_EFFECT, PointComparison, compare_points, contention_of
from dlbench.backends import get_info
from dlbench.envs import venvs
from dlbench.envs.interpreters import NotInstalled, state, supported
from dlbench.envs.releases import ReleaseError, in_range, offered, ordered, parse_versions
from dlbench.launch.registry import Launchers
from dlbench.launch.session import run_points
from dlbench.machine.env import host_identity, physical_cores
from dlbench.points import points
from dlbench.records import PointResult
from dlbench.refusals import refuse_impossible
from dlbench.runapi.gate import placeable
from dlbench.runapi.run import RunRequest
from dlbench.spec import PointSpec, SpecError, split_release
from dlbench.store.store import Store

BISECT_KIND = "bisect"
SOURCES: tuple[str, ...] = ("set-up", "index")  # where `--versions A..B` finds the releases between A and B


@dataclass(frozen=True)
class BisectRequest:
    """What `dlbench bisect` is asked: run's request for one configuration of one framework (no release named), the
    releases (`A..B` or `a,b,c`), where a range's releases come from, the smallest change called, and whether
    stored points may be reused."""

    run: RunRequest = field(default_factory=RunRequest)
    versions: str = ""
    source: str = "set-up"
    min_effect: float = MIN_EFFECT
    fresh: bool = False


@dataclass(frozen=True)
class PreparedBisect:
    """A bisection whose releases are known and whose ends passed the gate; nothing measured yet."""

    request: BisectRequest
    framework: str
    releases: tuple[str, ...]
    source_note: str  # where the releases came from, as the command says it
    specs: dict[str, PointSpec]
    launchers: Launchers
    store: Store


def set_up_releases(framework: str) -> list[str]:
    """The releases of a framework with an environment here: those set up (`dlbench setup jax==X`) and the default
    environment's own."""
    found = [r.release for r in venvs.releases(framework) if state(framework, r.release).installed]
    default = state(framework)
    if default.installed and default.version:
        found.append(default.version.partition("+")[0])
    return ordered(found)


def index_releases(framework: str) -> list[str]:
    """The releases of a framework the package index offers for any Python dlbench runs it on."""
    info = get_info(framework)
    lo, hi = supported(info)
    found = [r for m in range(lo[1], hi[1] + 1) for r in offered(info.release_packages[0], (lo[0], m))]
    return ordered(found)


def releases_of(framework: str, versions: str, source: str) -> tuple[list[str], str]:
    """The releases to halve, oldest first, and where they came from; a SpecError (one line) when fewer than two."""
    bounds, listed = parse_versions(versions)
    if bounds is None:
        if len(listed) < 2:
            raise SpecError(f"--versions takes A..B or a list of two releases or more (a,b,c); got {versions!r}")
        return ordered(listed), "the releases listed"
    if source not in SOURCES:
        raise SpecError(f"--releases must be one of {', '.join(SOURCES)}; got {source!r}")
    try:
        if source == "index":
            known, note = index_releases(framework), f"the package index (`pip index versions {framework}`)"
        else:
            known, note = set_up_releases(framework), "the environments set up here (`dlbench list`)"
        between = in_range(known, *bounds)
    except ReleaseError as exc:
        raise SpecError(str(exc)) from None
    missing = [b for b in bounds if b not in known]
    if source == "index" and missing:
        raise SpecError(f"{framework} {missing[0]} is not a release the package index offers")
    return between, note


def prepare_bisect(req: BisectRequest) -> PreparedBisect:
    """The releases, one point per release through points.py, what the spec alone shows cannot run refused for
    every release, and the ends through the whole gate (run's: launchers, bounds, an installed release)."""
    axes = req.run.axes
    if len(axes.frameworks) != 1 or split_release(axes.frameworks[0])[1] is not None:
        raise SpecError("bisect follows one framework (-f jax), its releases given by --versions")
    if axes.searched:
        raise SpecError(f"bisect measures given points: give --param {axes.searched} values, not max")
    if req.run.shared.converge:
        raise SpecError("bisect compares throughput: --converge is run's")
    framework = axes.frameworks[0]
    releases, note = releases_of(framework, req.versions, req.source)
    specs: dict[str, PointSpec] = {}
    for r in releases:
        made = points(dataclasses.replace(axes, frameworks=(f"{framework}=={r}",)), req.run.shared)
        if len(made) != 1:
            raise SpecError(
                f"bisect follows one configuration: give one model, batch size, precision and parameter value "
                f"(these make {len(made)} points per release)"
            )
        specs[r] = made[0]
    refuse_impossible(list(specs.values()))
    launchers = Launchers.build(req.run.hosts)
    placeable([specs[releases[0]], specs[releases[-1]]], launchers, req.run.force)
    return PreparedBisect(
        req, framework, tuple(releases), note, specs, launchers, Store.open(req.run.store_path, defer=True)
    )


HOST_KEYS: tuple[str, ...] = ("device", "device_model", "cpu_model")  # a stored point read back ran on this machine


def stored_point(store: Store, spec: PointSpec) -> tuple[PointResult, str] | None:
    """The newest ok point of this configuration and protocol measured on this kind of machine (its device and CPU
    model) in the store, not under contention, with its run, or None."""
    here = host_identity(spec.device, physical_cores())
    found = [
        p
        for p in store.points(models=[spec.model], frameworks=[spec.framework])
        if p.result.spec.key() == spec.key()
        and p.result.spec.protocol == spec.protocol
        and p.result.status == "ok"
        and not contention_of(p.result)  # a contended point gives no verdict: measured again, not read
        and all(p.result.env.identity.get(k) == here.get(k) for k in HOST_KEYS)
    ]
    return (found[-1].result, found[-1].run_id) if found else None


@dataclass(frozen=True)
class BisectHooks:
    """How a bisection reports while it runs: a line per release measured or read."""

    note: Callable[[str], None] = lambda line: None


@dataclass(frozen=True)
class BisectOutcome:
    """A finished bisection: its verdict, the run its new points were stored in ('' when none), where the releases
    came from."""

    bisection: Bisection
    run_id: str
    source_note: str
    framework: str


def execute_bisect(prepared: PreparedBisect, hooks: BisectHooks = BisectHooks()) -> BisectOutcome:
    """Halve the releases, measuring each one visited (or reading it from the store), one stored run for the
    points measured."""
    req, store = prepared.request, prepared.store
    store.take_back()  # what an earlier writer could not store, before the first point (prepare wrote none)
    run: list[str] = []

    def measure(release: str) -> Probe:
        spec = prepared.specs[release]
        kept = None if req.fresh else stored_point(store, spec)
        if kept is not None:
            hooks.note(f"{spec.framework_label}: read from the store (run {kept[1]})")
            return Probe(release, kept[0], kept[1])
        try:
            refuse_impossible([spec])
            placeable([spec], prepared.launchers, req.run.force)
        except NotInstalled as exc:
            raise CannotMeasure(
                f"{spec.framework_label} is needed and not set up ({exc}); set it up and run the same command again "
                "(the releases measured are kept and read back)"
            ) from None
        if not run:
            run.append(store.create_run(req.run.command, kind=BISECT_KIND, meta={"releases": list(prepared.releases)}))
        hooks.note(f"{spec.framework_label}: measuring")
        (result,) = run_points(store, run[0], [spec], prepared.launchers, wait_quiet_s=req.run.wait_quiet)
        return Probe(release, result)

    def judge(a: PointResult, b: PointResult) -> PointComparison:
        return compare_points(a, b, req.min_effect)

    try:
        found = bisect(prepared.releases, measure, judge)
    except KeyboardInterrupt:
        if run:
            store.finish_run(run[0], "interrupted")
        raise
    if run:
        store.finish_run(run[0], "done")
    return BisectOutcome(found, run[0] if run else "", prepared.source_note, prepared.framework)


__all__ = [
    "BISECT_KIND",
    "SOURCES",
    "BisectHooks",
    "BisectOutcome",
    "BisectRequest",
    "PreparedBisect",
    "execute_bisect",
    "index_releases",
    "prepare_bisect",
    "releases_of",
    "set_up_releases",
    "stored_point",
]
