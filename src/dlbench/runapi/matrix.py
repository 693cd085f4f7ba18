"""A sweep's matrix run into one stored run (the run API's): max batches searched first, every point committed as it
ends.

A sweep is resumable: points whose spec key the run already holds are not run again. A point whose
framework is not installed is recorded as unsupported, with the reason; none is dropped silently.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlbench.analysis.maxbatch import BATCH, MaxBatch, MaxBatchSettings, search_base, with_value
from dlbench.analysis.record import point_result
from dlbench.cases import get_case
from dlbench.data.layout import DataLayoutError, image_root, read_manifest, text_root
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.launch.lock import attach_request
from dlbench.launch.point import execute
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.points import param_bounds
from dlbench.records import PointResult
from dlbench.runapi.maxbatch import ProbeStarted, search
from dlbench.spec import PointSpec
from dlbench.store.store import Store
from dlbench.suite.expand import PlannedPoint

PointStarted = Callable[[PointSpec], ProgressSink | None]
PointDone = Callable[[PointResult], None]
SearchStarted = Callable[[PointSpec, int], None]


@dataclass(frozen=True)
class SweepPoint:
    """A resolved point to run (or to record without running, when result is set), with its batch groups."""

    spec: PointSpec
    groups: tuple[str, ...]
    result: PointResult | None = None
    search: MaxBatch | None = None


def run_searches(
    store: Store,
    planned: Sequence[PlannedPoint],
    settings: MaxBatchSettings,
    launchers: Launchers,
    started: SearchStarted | None = None,
    probe_started: ProbeStarted | None = None,
    command: str = "",
) -> dict[str, MaxBatch]:
    """One search per distinct configuration among the max points (a max batch, or a case parameter at max) of
    installed frameworks, keyed by spec key."""
    out: dict[str, MaxBatch] = {}
    for point in planned:
        base = search_base(point.spec)
        if not _searching(point) or base.key() in out:
            continue
        try:
            python = interpreter_for(base.framework, base.release)
        except NotInstalled:
            continue
        if started:
            started(base, len(out))
        quantity, (lo, hi, unit) = BATCH, (settings.lo, settings.hi, 1)
        if point.param_search is not None:
            quantity, (lo, hi, unit) = point.param_search, param_bounds(get_case(base.model), point.param_search)
        out[base.key()] = search(
            store,
            base,
            lo,
            hi,
            settings.warmup,
            settings.steps,
            settings.memory_limits.get(base.model),
            python=python,
            started=probe_started,
            launchers=launchers,
            quantity=quantity,
            unit=unit,
            command=command,
        )
    return out


def _searching(point: PlannedPoint) -> bool:
    return point.needs_search or point.param_search is not None


def _failed_search(spec: PointSpec, found: MaxBatch) -> PointResult:
    last = found.last
    what = "batch size" if found.quantity == BATCH else found.quantity
    why = f"no {what} in [{found.lo}, {found.hi}) fits" if last.too_big else f"the max {what} search stopped"
    return point_result(spec, last.status, None, f"{why}: {found.note}", [], time.time())


def resolve(planned: Sequence[PlannedPoint], searches: dict[str, MaxBatch]) -> list[SweepPoint]:
    """Points with their batch found, merged when two groups land on the same configuration (e.g. max = fixed)."""
    items: dict[str, SweepPoint] = {}
    for point in planned:
        found = searches.get(search_base(point.spec).key()) if _searching(point) else None
        if found is not None and found.max_batch is None:
            failed = _failed_search(point.spec, found)
            items[f"failed-search {point.spec.key()}"] = SweepPoint(
                point.spec, (point.batch_group,), result=failed, search=found
            )
            continue
        if _searching(point) and found is None:  # not searched (framework not installed): recorded as such
            items[f"unsearched {point.spec.key()}"] = SweepPoint(point.spec, (point.batch_group,))
            continue
        spec = with_value(point.spec, found.quantity, found.max_batch) if found and found.max_batch else point.spec
        key = spec.key()
        if key in items:
            old = items[key]
            items[key] = dataclasses.replace(old, groups=(*old.groups, point.batch_group), search=old.search or found)
        else:
            items[key] = SweepPoint(spec, (point.batch_group,), search=found)
    return list(items.values())


def data_source(spec: PointSpec) -> dict[str, object]:
    """What a real-data point read: the folder and its manifest (synthetic points: just the word)."""
    if spec.data != "real" or not spec.data_dir:
        return {"data": "synthetic"}
    try:
        from dlbench.cases import ImageInput, get_case

        image = isinstance(get_case(spec.model).input, ImageInput)
        folder = image_root(spec.data_dir) if image else text_root(spec.data_dir)
        manifest = read_manifest(folder)
    except DataLayoutError as exc:
        return {"data": "real", "folder": spec.data_dir, "problem": str(exc)}
    keep = ("kind", "images", "classes", "samples", "vocab_size", "seed", "sources", "layout_version")
    return {"data": "real", "folder": str(folder), **{k: manifest[k] for k in keep if k in manifest}}


def annotate(result: PointResult, item: SweepPoint) -> PointResult:
    """Add the sweep's facts to a point: its batch groups, its data source, and the search behind a max."""
    extra: dict[str, object] = {
        **result.extra,
        "batch_group": "+".join(item.groups),
        "data_source": data_source(item.spec),
    }
    if item.search is not None:
        extra[item.search.extra_key] = item.search.facts()
    return dataclasses.replace(result, extra=extra)


def point_identity(spec: PointSpec, groups: Sequence[str]) -> tuple[str, str]:
    """A point's identity in a sweep: its spec key and batch groups (a failed max search shares lo's key)."""
    return spec.key(), "+".join(groups)


def done_ids(store: Store, run_id: str) -> set[tuple[str, str]]:
    """Identities of the points a sweep run already holds."""
    keys = store.done_keys(run_id)
    if not keys:
        return set()
    return {
        point_identity(p.result.spec, str(p.result.extra.get("batch_group", "")).split("+"))
        for p in store.points([run_id])
    }


def pending(store: Store, run_id: str, items: Sequence[SweepPoint]) -> list[SweepPoint]:
    """The sweep points a run does not hold yet."""
    done = done_ids(store, run_id)
    return [j for j in items if point_identity(j.spec, j.groups) not in done]


def run_sweep_points(
    store: Store,
    run_id: str,
    items: Sequence[SweepPoint],
    launchers: Launchers,
    started: PointStarted | None = None,
    done: PointDone | None = None,
    wait_quiet_s: float = 0.0,
    price_per_hour: float | None = None,
    finish: Callable[[PointResult], PointResult] | None = None,
) -> list[PointResult]:
    """Run every item the run lacks, committing each point at once (``wait_quiet_s``, ``price_per_hour``: as in
    launch.point.execute; ``finish`` rewrites each result before it is stored: a convergence verdict). Ctrl-C
    propagates."""
    results = []
    for item in pending(store, run_id, items):
        python: str | None = None
        if item.result is not None:
            result = item.result
        else:
            try:
                python = interpreter_for(item.spec.framework, item.spec.release)
            except NotInstalled as exc:
                result = point_result(item.spec, "unsupported", None, str(exc), [], time.time())
            else:
                result = execute(
                    item.spec,
                    launchers,
                    python=python,
                    on_progress=started(item.spec) if started else None,
                    wait_quiet_s=wait_quiet_s,
                    price_per_hour=price_per_hour,
                )
        result = attach_request(store, run_id, annotate(result, item), python)  # the request that made it
        if finish is not None:
            result = finish(result)
        store.add_point(run_id, result)
        results.append(result)
        if done:
            done(result)
    return results
