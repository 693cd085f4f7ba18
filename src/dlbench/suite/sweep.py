"""Run a suite's points into one stored run: max batches searched first, every point committed as it ends.

A sweep is resumable: points whose spec key the run already holds are not run again. A point whose
framework is not installed is recorded as unsupported, with the reason; none is dropped silently.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlbench.data.layout import DataLayoutError, image_root, read_manifest, text_root
from dlbench.launch.interpreters import NotInstalled, interpreter_for
from dlbench.launch.maxbatch import MaxBatch, ProbeStarted, search
from dlbench.launch.point import execute, outcome_to_result
from dlbench.launch.worker_process import ChildOutcome, ProgressSink
from dlbench.results.schema import PointResult
from dlbench.results.store import Store
from dlbench.spec import PointSpec
from dlbench.suite.expand import PlannedPoint

PointStarted = Callable[[PointSpec], ProgressSink | None]
PointDone = Callable[[PointResult], None]
SearchStarted = Callable[[PointSpec, int], None]


@dataclass(frozen=True)
class MaxBatchSettings:
    """How the sweep searches: bounds, probe protocol, and the CPU device budget."""

    lo: int
    hi: int
    warmup: int = 1
    steps: int = 1
    memory_limits: dict[str, int] = dataclasses.field(default_factory=dict)  # model -> bytes (CPU budget)


@dataclass(frozen=True)
class Job:
    """A resolved point to run (or to record without running, when result is set), with its batch groups."""

    spec: PointSpec
    groups: tuple[str, ...]
    result: PointResult | None = None
    search: MaxBatch | None = None


def search_base(point: PlannedPoint) -> PointSpec:
    """The configuration a max point searches on: its spec on synthetic data."""
    return dataclasses.replace(point.spec, data="synthetic", data_dir=None)


def run_searches(store: Store, planned: Sequence[PlannedPoint], settings: MaxBatchSettings,
                 started: SearchStarted | None = None, probe_started: ProbeStarted | None = None
                 ) -> dict[str, MaxBatch]:
    """One search per distinct configuration among the max points of installed frameworks, keyed by spec key."""
    out: dict[str, MaxBatch] = {}
    for point in planned:
        base = search_base(point)
        if not point.needs_search or base.key() in out:
            continue
        try:
            python = interpreter_for(base.framework)
        except NotInstalled:
            continue
        if started:
            started(base, len(out))
        out[base.key()] = search(store, base, settings.lo, settings.hi, settings.warmup, settings.steps,
                                 settings.memory_limits.get(base.model), python=python, started=probe_started)
    return out


def _failed_search(spec: PointSpec, found: MaxBatch) -> PointResult:
    first = found.probes[0]
    outcome = ChildOutcome(first.status, error=f"no batch size in [{found.lo}, {found.hi}) fits: {first.error or ''}"
                           .strip())
    return outcome_to_result(spec, outcome, time.time())


def resolve(planned: Sequence[PlannedPoint], searches: dict[str, MaxBatch]) -> list[Job]:
    """Points with their batch found, merged when two groups land on the same configuration (e.g. max = fixed)."""
    jobs: dict[str, Job] = {}
    for point in planned:
        found = searches.get(search_base(point).key()) if point.needs_search else None
        if found is not None and found.max_batch is None:
            failed = _failed_search(point.spec, found)
            jobs[f"failed-search {point.spec.key()}"] = Job(point.spec, ("max",), result=failed, search=found)
            continue
        if point.needs_search and found is None:  # not searched (framework not installed): recorded as such
            jobs[f"unsearched {point.spec.key()}"] = Job(point.spec, ("max",))
            continue
        spec = point.with_batch(found.max_batch).spec if found is not None and found.max_batch else point.spec
        key = spec.key()
        if key in jobs:
            old = jobs[key]
            jobs[key] = dataclasses.replace(old, groups=(*old.groups, point.batch_group), search=old.search or found)
        else:
            jobs[key] = Job(spec, (point.batch_group,), search=found)
    return list(jobs.values())


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


def annotate(result: PointResult, job: Job) -> PointResult:
    """Add the sweep's facts to a point: its batch groups, its data source, and the search behind a max."""
    extra: dict[str, object] = {**result.extra, "batch_group": "+".join(job.groups),
                                "data_source": data_source(job.spec)}
    if job.search is not None:
        extra["max_batch"] = {"max": job.search.max_batch, "exact": job.search.exact, "lo": job.search.lo,
                              "hi": job.search.hi, "probes": len(job.search.probes),
                              "new_probes": job.search.new_probes, "note": job.search.note}
    return dataclasses.replace(result, extra=extra)


def job_id(spec: PointSpec, groups: Sequence[str]) -> tuple[str, str]:
    """A point's identity in a sweep: its spec key and batch groups (a failed max search shares lo's key)."""
    return spec.key(), "+".join(groups)


def done_ids(store: Store, run_id: str) -> set[tuple[str, str]]:
    """Identities of the points a sweep run already holds."""
    keys = store.done_keys(run_id)
    if not keys:
        return set()
    return {job_id(p.result.spec, str(p.result.extra.get("batch_group", "")).split("+"))
            for p in store.points([run_id])}


def pending(store: Store, run_id: str, jobs: Sequence[Job]) -> list[Job]:
    """The jobs a run does not hold yet."""
    done = done_ids(store, run_id)
    return [j for j in jobs if job_id(j.spec, j.groups) not in done]


def run_jobs(store: Store, run_id: str, jobs: Sequence[Job], started: PointStarted | None = None,
             done: PointDone | None = None) -> list[PointResult]:
    """Run every job the run lacks, committing each point at once. Ctrl-C propagates."""
    results = []
    for job in pending(store, run_id, jobs):
        if job.result is not None:
            result = job.result
        else:
            try:
                python = interpreter_for(job.spec.framework)
            except NotInstalled as exc:
                result = outcome_to_result(job.spec, ChildOutcome("unsupported", error=str(exc)), time.time())
            else:
                result = execute(job.spec, python=python, on_progress=started(job.spec) if started else None)
        result = annotate(result, job)
        store.add_point(run_id, result)
        results.append(result)
        if done:
            done(result)
    return results
