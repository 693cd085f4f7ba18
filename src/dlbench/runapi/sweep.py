"""The sweep API under `dlbench sweep`: a frozen request in; the suite's matrix prepared (a new sweep, or the
points a stored one lacks) and checked before anything is written, then run unattended into one resumable run; an
outcome out that the command only renders (or the planned points, for a dry run)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dlbench.analysis.maxbatch import MaxBatch, MaxBatchSettings, search_base
from dlbench.analysis.references import budget_note, missing_references, with_verdict
from dlbench.cases import ImageInput, get_case
from dlbench.data.imagenet import ensure_imagenet
from dlbench.data.layout import IMAGE_SUBDIR, TEXT_SUBDIR
from dlbench.data.text import ensure_text
from dlbench.launch.bounds import check_bounds
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import NAMES, Launchers
from dlbench.machine.env import choose_device
from dlbench.records import PointResult, exit_code
from dlbench.runapi import converge
from dlbench.runapi.gate import admit_matrix, placeable
from dlbench.runapi.matrix import pending, resolve, run_searches, run_sweep_points
from dlbench.runapi.maxbatch import lookup
from dlbench.spec import PointSpec, SpecError, parse_size
from dlbench.store.rows import RunRecord
from dlbench.store.store import Store, StoreError, resolve_path
from dlbench.store.store_sql import parse_target
from dlbench.suite import Suite, SuiteError, builtin_names, load
from dlbench.suite.expand import PlannedPoint, expand, memory_limit_bytes

SWEEP_KIND = "sweep"


@dataclass(frozen=True)
class SweepRequest:
    """What `dlbench sweep` is asked to do, as typed values (the command parses its options into them)."""

    suite_name: str | None = None
    resume_id: str | None = None
    dry_run: bool = False
    only: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # axis -> the values to keep (--only)
    frameworks: tuple[str, ...] = ()  # the frameworks to keep (--framework); () keeps the suite's
    device: str = "suite"  # suite: the suite's own; auto, cpu or cuda
    data_dir: str | None = None
    memory_limit: int | None = None  # bytes: the max-batch probes' CPU budget over the suite's
    launcher: str | None = None
    store_path: str | None = None
    force: bool = False
    skip_impossible: bool = False  # skip (and name) impossible points instead of refusing the suite
    wait_quiet: float = 0.0
    price_per_hour: float | None = None
    command: str | None = None  # the command line kept with the run; default "dlbench sweep SUITE"


class SweepProgress(Protocol):
    """What shows a sweep's progress: the searches first, then the points."""

    def note(self, text: str) -> None:
        """A line about what runs now (a search)."""

    def started(self, index: int, spec: PointSpec) -> ProgressSink | None:
        """A point (or a probe) started; the sink its progress events go to."""

    def done(self, index: int, result: PointResult) -> None:
        """A point ended, stored."""

    def restart(self, total: int) -> None:
        """The points to run are known now: count them from zero."""


@dataclass(frozen=True)
class SweepHooks:
    """How a sweep reports while it runs: a line of news, and a progress display over N planned points."""

    note: Callable[[str], None] = lambda line: None
    progress: Callable[[int], AbstractContextManager[SweepProgress | None]] = lambda total: nullcontext()
    starting: Callable[[], None] = lambda: None  # the run is claimed and its points are about to start


@dataclass(frozen=True)
class PreparedSweep:
    """A sweep whose points passed every check, its store open (deferred: written from its first use)."""

    request: SweepRequest
    suite: Suite
    device: str
    folder: str | None
    only: dict[str, list[str]]
    memory_limit: int | None
    planned: tuple[PlannedPoint, ...]
    settings: MaxBatchSettings
    launchers: Launchers
    store: Store  # opened while preparing: a store that cannot be opened fails before any other line
    run_id: str | None  # the stored run it resumes


@dataclass(frozen=True)
class PlannedSweep:
    """A dry run: the planned points, with the max batch a store already holds for those searched."""

    suite: Suite
    planned: tuple[PlannedPoint, ...]
    found: tuple[MaxBatch | None, ...]
    settings: MaxBatchSettings


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: every point its run holds, the searches and their bases, and this session's time."""

    run_id: str
    suite: Suite
    store_path: Path | str
    results: tuple[PointResult, ...]
    searches: dict[str, MaxBatch]
    bases: dict[str, PointSpec]
    elapsed_s: float

    @property
    def exit_code(self) -> int:
        """0 when every point ended ok or was refused as unsupported, else 1."""
        return exit_code(r.status for r in self.results)


def default_data_dir(suite: Suite, store_path: Path) -> Path:
    """Where a sweep keeps the real data it generates: beside the store, named by the generator's settings."""
    r = suite.real_data
    return store_path.parent / "data" / f"i{r.images}-c{r.classes}-t{r.text_samples}-s{r.seed}"


def ensure_data(suite: Suite, planned: tuple[PlannedPoint, ...], folder: Path, note: Callable[[str], None]) -> None:
    """Generate the image and text data that real-data points need, where the folder lacks them."""
    real = [p.spec for p in planned if p.spec.data == "real"]
    r = suite.real_data
    if any(isinstance(get_case(s.model).input, ImageInput) for s in real):
        note(f"real data: images in {folder / IMAGE_SUBDIR} ({r.images} JPEGs, {r.classes} classes)")
        ensure_imagenet(folder / IMAGE_SUBDIR, r.images, r.classes, seed=r.seed)
    if any(not isinstance(get_case(s.model).input, ImageInput) for s in real):
        note(f"real data: BERT samples in {folder / TEXT_SUBDIR} ({r.text_samples} samples)")
        ensure_text(folder / TEXT_SUBDIR, r.text_samples, seed=r.seed)


def settings_for(suite: Suite, planned: list[PlannedPoint], memory_limit: int | None) -> MaxBatchSettings:
    """The max-batch settings; on the CPU every searched model needs a memory budget."""
    limits: dict[str, int] = {}
    for p in planned:
        if p.needs_search or p.param_search is not None:
            limit = memory_limit_bytes(suite, p.spec.model, memory_limit)
            if limit is not None:
                limits[p.spec.model] = limit
            elif p.spec.device == "cpu":
                raise SuiteError(
                    f"suite {suite.name}: a max-batch search on the CPU needs an emulated device budget "
                    f"for {p.spec.model}: set memory_limit in the suite or pass --memory-limit 8GiB"
                )
    m = suite.max_batch
    return MaxBatchSettings(lo=m.lo, hi=m.hi, warmup=m.warmup, steps=m.steps, memory_limits=limits)


def _stored_run(path: str | None, run_id: str) -> RunRecord:
    """The stored run `run_id`, read without writing to its store (#43): a SQLite file through a read-only view (an
    old one is migrated in memory, never in place), a file not made yet as the empty store it is (it stays unmade),
    a server's store deferred (set up to be read: only a store of an older schema is migrated first)."""
    store = Store.open(path, defer=True)
    if store.target.file is not None and store.target.file.exists():
        store.close()
        store = Store.open(path, readonly=True)
    try:
        return store.get_run(run_id)
    finally:
        store.close()


def _resumed(req: SweepRequest) -> tuple[str, Suite, str, str | None, dict[str, list[str]], int | None]:
    """A stored sweep's run id, suite, device, data folder, --only axes and memory limit."""
    assert req.resume_id is not None
    if req.resume_id.startswith("-") or not req.resume_id.strip():
        raise SpecError(
            f"--resume takes the id of a stored sweep run; got {req.resume_id!r}: give the run "
            "id (`dlbench results` lists them)"
        )
    if req.suite_name:
        raise SpecError(
            f"--resume {req.resume_id} resumes a stored sweep with its own suite: give no suite "
            f"({req.suite_name}) with it"
        )
    run = _stored_run(req.store_path, req.resume_id)
    if run.kind != SWEEP_KIND:
        raise StoreError(f"run {run.id} is a {run.kind}, not a sweep: only sweeps resume")
    meta = run.meta
    suite = Suite.model_validate(meta["suite"])
    folder = str(meta["data_dir"]) if meta.get("data_dir") else None
    stored_only = meta.get("only") or {}
    only_axes = {str(k): [str(v) for v in vs] for k, vs in stored_only.items()} if isinstance(stored_only, dict) else {}
    stored_limit = meta.get("memory_limit")  # bytes; text (8GiB) where an older dlbench kept the sweep
    memory_limit = req.memory_limit or (parse_size(str(stored_limit)) if stored_limit else None)
    return run.id, suite, str(meta["device"]), folder, only_axes, memory_limit


def prepare_sweep(req: SweepRequest, note: Callable[[str], None] = lambda line: None) -> PreparedSweep | PlannedSweep:
    """Check the request, expand the suite and check every point before anything is written; for a dry run, the
    planned points with the max batches the store holds (read from a server, or a file that exists). A point the
    spec shows cannot run refuses the suite (dlbench.refusals), or with skip_impossible is named to `note` and
    left out."""
    if req.launcher and req.resume_id:
        raise SpecError("--launcher with --resume: a resumed sweep keeps the launcher it started with")
    if req.frameworks and req.resume_id:
        raise SpecError("--framework with --resume: a resumed sweep keeps the frameworks it started with")
    run_id: str | None = None
    memory_limit = req.memory_limit
    if req.resume_id:
        run_id, suite, dev, folder, only_axes, memory_limit = _resumed(req)
    else:
        if not req.suite_name:
            raise SpecError(f"name a suite ({', '.join(builtin_names())}) or a suite file, or --resume RUN_ID")
        suite = load(req.suite_name)
        if req.launcher:
            suite = suite.model_copy(update={"launcher": req.launcher})
        dev = choose_device(suite.device if req.device == "suite" else req.device)[0]
        only_axes = {axis: list(values) for axis, values in req.only.items()}
        if req.frameworks:
            only_axes.setdefault("framework", []).extend(req.frameworks)
        folder = req.data_dir or str(default_data_dir(suite, resolve_path(req.store_path)))
    if suite.launcher != "auto" and suite.launcher not in NAMES:
        known = ", ".join(("auto", *NAMES))
        raise SuiteError(f"suite {suite.name}: launcher: unknown launcher {suite.launcher!r}; known: {known}")
    planned = expand(suite, dev, str(Path(folder).resolve()) if folder else None, only_axes)
    skip = req.skip_impossible or suite.skip_impossible
    launchers = Launchers.build()  # torchrun, slurm, mpirun, hosts, configured from $DLBENCH_HOSTS and friends
    remote = bool(launchers.config.hosts)
    planned = admit_matrix(planned, lambda p: p.spec, skip, note, suite.name, req.force, remote)  # gate.py
    asked = suite.converge.steps if suite.converge else None
    for line in dict.fromkeys(n for p in planned if (n := budget_note(p.spec, asked))):
        note(line)  # a convergence budget that could never read `slower`, raised (#44)
    check_bounds([p.spec for p in planned], req.force, remote_hosts=bool(launchers.config.hosts))
    settings = settings_for(suite, planned, memory_limit)
    if req.dry_run:  # stored max batches come from the store itself: a server, or a file that exists
        target = parse_target(req.store_path)
        present = target.file is None or target.file.exists()
        reader = Store(req.store_path, readonly=True) if present else None
        found = tuple(
            lookup(reader, search_base(p.spec), settings.lo, settings.hi, settings.memory_limits.get(p.spec.model))
            if p.needs_search and reader is not None
            else None
            for p in planned
        )
        return PlannedSweep(suite, tuple(planned), found, settings)
    if not planned:
        raise SuiteError(f"suite {suite.name} has no point left after its exclusions and --only")
    # the rest of the gate; a framework not installed here is recorded `unsupported` by its points, not refused
    placeable([p.spec for p in planned], launchers, req.force, installed=False)
    store = Store.open(req.store_path, defer=True)  # nothing written before the sweep starts, a resumed one too
    return PreparedSweep(
        req, suite, dev, folder, only_axes, memory_limit, tuple(planned), settings, launchers, store, run_id
    )


def execute_sweep(prepared: PreparedSweep, hooks: SweepHooks = SweepHooks()) -> SweepOutcome:
    """Run the searches, then every point the run lacks, each committed as it ends; Ctrl-C marks the run
    interrupted (says how to resume it) and propagates."""
    req, suite, planned, launchers = prepared.request, prepared.suite, prepared.planned, prepared.launchers
    store = prepared.store
    store.take_back()  # what an earlier writer could not store, before the first point (prepare wrote none)
    folder = prepared.folder
    if any(p.spec.data == "real" for p in planned) and folder and not req.data_dir and not prepared.run_id:
        ensure_data(suite, planned, Path(folder), hooks.note)
    run_id = prepared.run_id
    if run_id is None:
        run_id = store.create_run(
            req.command or f"dlbench sweep {suite.name}",
            kind=SWEEP_KIND,
            meta={
                "suite_name": suite.name,
                "suite": suite.model_dump(mode="json"),
                "device": prepared.device,
                "data_dir": str(Path(folder).resolve()) if folder else None,
                "only": prepared.only,
                "memory_limit": prepared.memory_limit,
                "points": len(planned),
            },
        )
    with store.claim_run(run_id):  # one controller per run: a second `sweep --resume` of it is refused
        if prepared.run_id:
            store.finish_run(run_id, "running")
        hooks.starting()
        return _run(store, run_id, prepared, launchers, hooks)


def _run(store: Store, run_id: str, prepared: PreparedSweep, launchers: Launchers, hooks: SweepHooks) -> SweepOutcome:
    start = time.monotonic()
    planned, settings = list(prepared.planned), prepared.settings
    bases = {
        search_base(p.spec).key(): search_base(p.spec) for p in planned if p.needs_search or p.param_search is not None
    }
    try:
        with hooks.progress(len(planned)) as ui:

            def search_started(base: PointSpec, n: int) -> None:
                if ui:
                    ui.note(f"max batch {n + 1}/{len(bases)}: {base.framework} {base.model} {base.precision}")

            searches = run_searches(
                store,
                planned,
                settings,
                launchers,
                started=search_started,
                probe_started=lambda batch, spec: ui.started(0, spec) if ui else None,
                command=store.get_run(run_id).command,
            )
            jobs = resolve(planned, searches)
            todo = pending(store, run_id, jobs)
            # Convergence points (a suite's converge: block) are judged against reference runs: those the store
            # lacks are measured first, once, and kept marked in this run, as `run --converge` does (#34).
            references = missing_references(store.points(), [j.spec for j in todo if j.result is None])
            if ui:
                ui.restart(len(references) + len(todo))
            converge.measure_references(
                store, run_id, references, launchers, ui.started if ui else None, ui.done if ui else None
            )
            run_sweep_points(
                store,
                run_id,
                todo,
                launchers,
                started=lambda spec: ui.started(0, spec) if ui else None,
                done=lambda result: ui.done(0, result) if ui else None,
                wait_quiet_s=prepared.request.wait_quiet,
                price_per_hour=prepared.request.price_per_hour,
                finish=lambda r: with_verdict(r, store.points(models=[r.spec.model])),
            )
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        hooks.note(f"interrupted: finished points are stored; resume with: dlbench sweep --resume {run_id}")
        raise
    store.finish_run(run_id, "done")
    results = tuple(p.result for p in store.points([run_id]))
    return SweepOutcome(run_id, prepared.suite, store.path, results, searches, bases, time.monotonic() - start)
