"""`dlbench sweep SUITE|FILE`: run a suite's matrix unattended into one resumable run; --dry-run lists it."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from dlbench.cli.options import resolve_device, say_device
from dlbench.cli.progress import RunProgress, describe
from dlbench.cli.watch_options import watch_options
from dlbench.launch.bounds import check_bounds
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.registry import NAMES as LAUNCHER_NAMES
from dlbench.launch.registry import Launchers
from dlbench.report.table import fmt_case_params, points_table
from dlbench.records import PointResult, exit_code
from dlbench.store.store import Store, StoreError, resolve_path
from dlbench.store.store_sql import parse_target
from dlbench.spec import PointSpec, parse_size
from dlbench.suite import Suite, SuiteError, builtin_names, load
from dlbench.suite.expand import PlannedPoint, expand, memory_limit_bytes
from dlbench.suite.maxbatch import BATCH, MaxBatch, lookup, probe_bound, value_of
from dlbench.suite.schema import AXES
from dlbench.suite.sweep import MaxBatchSettings, pending, resolve, run_searches, run_sweep_points, search_base

SWEEP_KIND = "sweep"


def parse_only(items: tuple[str, ...]) -> dict[str, list[str]]:
    """('scale=1n1c', 'framework=torch,tf') -> {'scale': ['1n1c'], 'framework': ['torch', 'tf']}."""
    out: dict[str, list[str]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or axis.strip() not in AXES or not values.strip():
            raise click.UsageError(f"--only takes AXIS=VALUE[,VALUE...] with an axis of {', '.join(AXES)}; "
                                   f"got {item!r}")
        out.setdefault(axis.strip(), []).extend(v.strip() for v in values.split(",") if v.strip())
    return out


def default_data_dir(suite: Suite, store_path: Path) -> Path:
    """Where a sweep keeps the real data it generates: beside the store, named by the generator's settings."""
    r = suite.real_data
    return store_path.parent / "data" / f"i{r.images}-c{r.classes}-t{r.text_samples}-s{r.seed}"


def ensure_data(suite: Suite, planned: list[PlannedPoint], folder: Path, console: Console) -> None:
    """Generate the image and text data that real-data points need, where the folder lacks them."""
    from dlbench.cases import ImageInput, get_case
    from dlbench.data.imagenet import ensure_imagenet
    from dlbench.data.layout import IMAGE_SUBDIR, TEXT_SUBDIR
    from dlbench.data.text import ensure_text

    real = [p.spec for p in planned if p.spec.data == "real"]
    r = suite.real_data
    if any(isinstance(get_case(s.model).input, ImageInput) for s in real):
        console.print(f"real data: images in {folder / IMAGE_SUBDIR} ({r.images} JPEGs, {r.classes} classes)")
        ensure_imagenet(folder / IMAGE_SUBDIR, r.images, r.classes, seed=r.seed)
    if any(not isinstance(get_case(s.model).input, ImageInput) for s in real):
        console.print(f"real data: BERT samples in {folder / TEXT_SUBDIR} ({r.text_samples} samples)")
        ensure_text(folder / TEXT_SUBDIR, r.text_samples, seed=r.seed)


def settings_for(suite: Suite, planned: list[PlannedPoint], memory_limit: str | None) -> MaxBatchSettings:
    """The max-batch settings; on the CPU every searched model needs a memory budget."""
    limits: dict[str, int] = {}
    for p in planned:
        if p.needs_search or p.param_search is not None:
            limit = memory_limit_bytes(suite, p.spec.model, memory_limit)
            if limit is not None:
                limits[p.spec.model] = limit
            elif p.spec.device == "cpu":
                raise SuiteError(f"suite {suite.name}: a max-batch search on the CPU needs an emulated device budget "
                                 f"for {p.spec.model}: set memory_limit in the suite or pass --memory-limit 8GiB")
    m = suite.max_batch
    return MaxBatchSettings(lo=m.lo, hi=m.hi, warmup=m.warmup, steps=m.steps, memory_limits=limits)


def batch_label(p: PlannedPoint, found: MaxBatch | None, settings: MaxBatchSettings) -> str:
    """How a planned point's batch reads in --dry-run."""
    if not p.needs_search:
        return f"{p.spec.batch_size} ({p.batch_group})" if p.batch_group != str(p.spec.batch_size) else p.batch_group
    if found is not None:
        return f"{found.max_batch} (max, stored)" if found.max_batch else "max: none fits (stored)"
    return f"max (search {settings.lo}..{settings.hi})"


def list_points(suite: Suite, planned: list[PlannedPoint], settings: MaxBatchSettings, store: Store | None) -> None:
    """List the points without running anything."""
    t = Table(title=f"suite {suite.name}: {len(planned)} points")
    for col in ("#", "framework", "model", "batch", "precision", "compile", "data", "scale", "strategy"):
        t.add_column(col)
    for i, p in enumerate(planned, start=1):
        s = p.spec
        found = None
        if p.needs_search and store is not None:
            found = lookup(store, search_base(p), settings.lo, settings.hi, settings.memory_limits.get(s.model))
        model = s.model + fmt_case_params([(k, v) for k, v in s.case_params if k != p.param_search])
        model += f" {p.param_search}=max" if p.param_search else ""
        t.add_row(str(i), s.framework, model, batch_label(p, found, settings), s.precision,
                  "on" if s.compile else "off", s.data, s.scale, s.strategy)
    out = Console()
    out.print(t)
    searches = len({search_base(p).key() for p in planned if p.needs_search})
    if planned:
        proto = planned[0].spec.protocol
        out.print(f"{suite.title or suite.name}. Protocol: {proto.warmup} warm-up and {proto.steps} measured steps, "
                  f"{proto.statistic} of {proto.repeats} repeats; timeout {planned[0].spec.timeout_s:g} s per point.")
    if searches:
        out.print(f"{searches} max-batch searches (at most {probe_bound(settings.lo, settings.hi)} probes each, "
                  "fewer where the store has them).")


def sweep_table(results: list[PointResult], title: str, width: int | None = None) -> Table:
    """The points table (report/table.py, compact and never cutting what tells rows apart) with the sweep's own
    columns where they say something: the batch group (fixed, max ...) and the input wait of real data (peak memory
    and the rest: `dlbench results RUN --wide`)."""
    group = any(str(r.extra.get("batch_group", r.spec.batch_size)) != str(r.spec.batch_size) for r in results)
    wait = any(r.spec.data == "real" for r in results)
    extra = (*(("group",) if group else ()), *(("wait",) if wait else ()))
    return points_table(results, title=title, extra=extra, width=width)


def maxbatch_table(searches: dict[str, MaxBatch], results: list[PointResult], bases: dict[str, PointSpec]) -> Table:
    """One row per search (of the batch, or of a case parameter): the max found, whether exact, probes, and the
    throughput at the max."""
    batch_only = all(f.quantity == BATCH for f in searches.values())
    t = Table(title="max batch size" if batch_only else "max searches")
    for col in ("framework", "model", "precision", "max", "exact", "probes (new)", "bound", "samples/s at max",
                "note"):
        t.add_column(col)
    for key, found in searches.items():
        b = bases[key]
        at_max = [r for r in results if r.spec.framework == b.framework and r.spec.model == b.model
                  and r.spec.precision == b.precision and r.spec.compile == b.compile and r.spec.data == "synthetic"
                  and value_of(r.spec, found.quantity) == found.max_batch and r.metrics is not None]
        thr = f"{at_max[0].metrics.throughput:,.1f}" if at_max and at_max[0].metrics else (
            f"{found.at_max.throughput:,.1f} (probe)" if found.at_max and found.at_max.throughput else "-")
        what = "" if found.quantity == BATCH else f" ({found.quantity})"
        t.add_row(b.framework, b.model + what, b.precision + (" +compile" if b.compile else ""),
                  str(found.max_batch) if found.max_batch else "none", "yes" if found.exact else "no",
                  f"{len(found.probes)} ({found.new_probes})", str(probe_bound(found.lo, found.hi)), thr, found.note)
    return t


@click.command("sweep")
@click.argument("suite_name", required=False, metavar="SUITE|FILE")
@click.option("--resume", "resume_id", help="Run only the points this sweep run lacks (its suite is stored with it).")
@click.option("--dry-run", is_flag=True, help="List the points (and stored max batches) and run nothing.")
@click.option("--only", multiple=True, metavar="AXIS=V[,V]", help="Keep only these values of an axis "
              "(repeatable), e.g. --only framework=torch --only scale=1n1c.")
@click.option("--framework", "-f", help="Comma-separated frameworks to keep, as in `run` (shorthand for --only "
              "framework=...; 'all' keeps the suite's).")
@click.option("--device", type=click.Choice(["suite", "auto", "cpu", "cuda"]), default="suite", show_default=True,
              help="Override the suite's device.")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Real data made by `dlbench data`. Default: "
              "generated beside the store as the suite's real_data says.")
@click.option("--memory-limit", help="Emulated device budget of max-batch probes on the CPU, e.g. 8GiB "
              "(overrides the suite's).")
@click.option("--launcher", type=click.Choice(["auto", *LAUNCHER_NAMES]), help="Override the suite's launcher, "
              "e.g. slurm to run every point as a Slurm job.")
@click.option("--list", "list_suites", is_flag=True, help="List the built-in suites.")
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
@click.option("--force", is_flag=True, help="Start more ranks or threads than this machine has GPUs or logical "
              "CPUs (see README, Run it: bounds).")
@watch_options
def sweep(suite_name: str | None, resume_id: str | None, dry_run: bool, only: tuple[str, ...], framework: str | None,
          device: str, data_dir: str | None, memory_limit: str | None, launcher: str | None, list_suites: bool,
          store_path: str | None, force: bool = False, wait_quiet: float = 0.0,
          price_per_hour: float | None = None) -> int:
    """Run a suite (built-in name or YAML file) as one resumable run; Ctrl-C keeps every finished point."""
    if list_suites:
        for name in builtin_names():
            s = load(name)
            click.echo(f"{name:12} {s.title}")
        return 0
    if memory_limit is not None:
        parse_size(memory_limit)  # bad input fails here, dry run or not
    console = Console(stderr=True)
    if launcher and resume_id:
        raise click.UsageError("--launcher with --resume: a resumed sweep keeps the launcher it started with")
    if framework and resume_id:
        raise click.UsageError("--framework with --resume: a resumed sweep keeps the frameworks it started with")
    if framework and framework.strip() != "all":
        only = (*only, f"framework={framework}")
    if resume_id:
        if resume_id.startswith("-") or not resume_id.strip():
            raise click.UsageError(f"--resume takes the id of a stored sweep run; got {resume_id!r}: give the run "
                                   "id (`dlbench results` lists them)")
        if suite_name:
            raise click.UsageError(f"--resume {resume_id} resumes a stored sweep with its own suite: give no suite "
                                   f"({suite_name}) with it")
        store = Store(store_path)
        run = store.get_run(resume_id)
        if run.kind != SWEEP_KIND:
            raise StoreError(f"run {run.id} is a {run.kind}, not a sweep: only sweeps resume")
        meta = run.meta
        suite = Suite.model_validate(meta["suite"])
        dev = str(meta["device"])
        folder = str(meta["data_dir"]) if meta.get("data_dir") else None
        stored_only = meta.get("only") or {}
        only_axes = {str(k): [str(v) for v in vs] for k, vs in stored_only.items()} if isinstance(
            stored_only, dict) else {}
        memory_limit = memory_limit or (str(meta["memory_limit"]) if meta.get("memory_limit") else None)
        run_id = run.id
    else:
        if not suite_name:
            raise click.UsageError(f"name a suite ({', '.join(builtin_names())}) or a suite file, or --resume RUN_ID")
        suite = load(suite_name)
        if launcher:
            suite = suite.model_copy(update={"launcher": launcher})
        dev = resolve_device(suite.device if device == "suite" else device)
        only_axes = parse_only(only)
        folder = data_dir or str(default_data_dir(suite, resolve_path(store_path)))
        store = None
    planned = expand(suite, dev, str(Path(folder).resolve()) if folder else None, only_axes)
    check_bounds([p.spec for p in planned], force, remote_hosts=bool(HostsConfig.from_env().hosts))
    settings = settings_for(suite, planned, memory_limit)
    if dry_run:  # stored max batches come from the store itself: a server, or a file that exists
        target = parse_target(store_path)
        present = target.file is None or target.file.exists()
        list_points(suite, planned, settings, store or (Store(store_path, readonly=True) if present else None))
        return 0
    if not planned:
        raise SuiteError(f"suite {suite.name} has no point left after its exclusions and --only")
    launchers = Launchers.build()  # torchrun, slurm, mpirun, hosts, configured from $DLBENCH_HOSTS and friends
    for p in planned:
        launchers.check(p.spec)
    if not resume_id:
        say_device(suite.device if device == "suite" else device)
    store = store or Store(store_path)
    if any(p.spec.data == "real" for p in planned) and folder and not data_dir and not resume_id:
        ensure_data(suite, planned, Path(folder), console)
    if not resume_id:
        command = ("dlbench " + shlex.join(sys.argv[1:]) if sys.argv[0].endswith("dlbench")
                   else f"dlbench sweep {suite.name}")
        run_id = store.create_run(command, kind=SWEEP_KIND, meta={
            "suite_name": suite.name, "suite": suite.model_dump(mode="json"), "device": dev,
            "data_dir": str(Path(folder).resolve()) if folder else None, "only": only_axes,
            "memory_limit": memory_limit, "points": len(planned)})
    with store.claim_run(run_id):  # one controller per run: a second `sweep --resume` of it is refused
        if resume_id:
            store.finish_run(run_id, "running")
        return _run(store, run_id, suite, planned, settings, launchers, console, wait_quiet, price_per_hour)


def _run(store: Store, run_id: str, suite: Suite, planned: list[PlannedPoint], settings: MaxBatchSettings,
         launchers: Launchers, console: Console, wait_quiet: float = 0.0, price_per_hour: float | None = None) -> int:
    start = time.monotonic()
    bases = {search_base(p).key(): search_base(p) for p in planned if p.needs_search or p.param_search is not None}
    try:
        with RunProgress(len(planned), console) as ui:
            def search_started(base: PointSpec, n: int) -> None:
                ui.note(f"max batch {n + 1}/{len(bases)}: {base.framework} {base.model} {base.precision}")

            searches = run_searches(store, planned, settings, launchers, started=search_started,
                                    probe_started=lambda batch, spec: ui.started(0, spec))
            jobs = resolve(planned, searches)
            todo = pending(store, run_id, jobs)
            ui.progress.update(ui.points, total=len(todo), completed=0, description="points")
            run_sweep_points(store, run_id, todo, launchers, started=lambda spec: ui.started(0, spec),
                             done=lambda result: ui.done(0, result), wait_quiet_s=wait_quiet,
                             price_per_hour=price_per_hour)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        console.print(f"interrupted: finished points are stored; resume with: dlbench sweep --resume {run_id}")
        raise
    store.finish_run(run_id, "done")
    results = [p.result for p in store.points([run_id])]
    out = Console()
    out.print(sweep_table(results, title=f"sweep {suite.name}: run {run_id}", width=out.width))
    if searches:
        out.print(maxbatch_table(searches, results, bases))
    failed = sum(r.status != "ok" for r in results)
    out.print(f"{len(results)} points ({failed} not ok: each says why) in {time.monotonic() - start:,.0f} s this "
              f"session. Results: {store.path} (run {run_id}); show them with: dlbench results {run_id}")
    return exit_code(r.status for r in results)


__all__ = ["describe", "sweep"]
