"""The run API under `dlbench run`: a frozen request in; its points prepared (every check made before anything is
written) and executed into one stored run, each committed as it ends; an outcome out that the command only renders."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dlbench.analysis.references import budget_note, missing_references, with_verdict
from dlbench.analysis.scaling import Scaled, missing_baselines, scaled
from dlbench.cases import get_case
from dlbench.data.layout import check_data_dir
from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.lock import attach_request
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import NAMES, Launchers
from dlbench.launch.session import run_points
from dlbench.machine.env import host_identity, physical_cores
from dlbench.points import Axes, Shared, points
from dlbench.records import PointResult, exit_code
from dlbench.refusals import refuse_impossible
from dlbench.runapi import converge
from dlbench.runapi.gate import placeable
from dlbench.runapi.maxbatch import search_param
from dlbench.spec import PointSpec, SpecError
from dlbench.spec import Protocol as MeasureProtocol
from dlbench.store.rows import StoredPoint
from dlbench.store.store import Store

LAUNCHER_NAMES: tuple[str, ...] = NAMES  # for the commands' help: where points can run


def hosts_config(
    hosts: str | None, reach: str | None, master_addr: str | None, rendezvous_timeout_s: float | None
) -> HostsConfig:
    """Where a request's ranks may run: --hosts 'h1,h2', --reach 'ssh {host}', the rendezvous address and timeout
    (a reach command that cannot be split: SpecError)."""
    return HostsConfig.from_options(hosts, reach, master_addr, rendezvous_timeout_s)


@dataclass(frozen=True)
class RunRequest:
    """What `dlbench run` is asked to measure, as typed values (the command parses its options into them): the
    points' axes and what they share, where the ranks may run, the store, and how the run is kept."""

    axes: Axes = field(default_factory=Axes)
    shared: Shared = field(default_factory=Shared)
    hosts: HostsConfig = field(default_factory=HostsConfig)
    store_path: str | None = None
    force: bool = False
    wait_quiet: float = 0.0
    price_per_hour: float | None = None
    command: str = "dlbench run"


class PointProgress(Protocol):
    """What shows the points' progress while they run (the command's progress bar)."""

    def started(self, index: int, spec: PointSpec) -> ProgressSink | None:
        """A point started; the sink its progress events go to."""

    def done(self, index: int, result: PointResult) -> None:
        """A point ended, stored."""

    def note(self, text: str) -> None:
        """Name what the points counted now are (the reference runs of --converge, then the points)."""


@dataclass(frozen=True)
class RunHooks:
    """How a run reports while it runs: a line per search verdict, a progress display over N points, and the run id
    of a run stopped by Ctrl-C."""

    note: Callable[[str], None] = lambda line: None
    progress: Callable[[int], AbstractContextManager[PointProgress | None]] = lambda total: nullcontext()
    interrupted: Callable[[str], None] = lambda run_id: None  # Ctrl-C: the run is marked interrupted, then this
    starting: Callable[[], None] = lambda: None  # the run is created and its first point is about to start


@dataclass(frozen=True)
class PreparedRun:
    """A run whose points passed every check, with its launchers and its store open; nothing written yet."""

    request: RunRequest
    specs: tuple[PointSpec, ...]
    searched: str | None
    launchers: Launchers
    store: Store
    notes: tuple[str, ...] = ()  # said when the run starts (a convergence budget raised)


@dataclass(frozen=True)
class RunOutcome:
    """A finished run: its stored points (search failures first), and every point the store holds to compare."""

    run_id: str
    store_path: Path | str
    results: tuple[PointResult, ...]
    stored: tuple[StoredPoint, ...]
    protocol: MeasureProtocol

    @property
    def exit_code(self) -> int:
        """0 when every point ended ok or was refused as unsupported, else 1."""
        return exit_code(r.status for r in self.results)

    def mine(self) -> list[StoredPoint]:
        """This run's stored points."""
        return [p for p in self.stored if p.run_id == self.run_id]

    def scales(self) -> list[Scaled | None]:
        """Each result's speedup and efficiency against its stored 1-device baseline (analysis/scaling.py)."""
        return [scaled(list(self.stored), r) for r in self.results]


def prepare_run(req: RunRequest) -> PreparedRun:
    """Build every point (points.py) and pass them through the gate (runapi/gate.py): a SpecError or a one-line
    refusal before anything is written; then open the store."""
    specs = points(req.axes, req.shared)
    for spec in specs:
        check_data_dir(spec, get_case(spec.model))
    searched = req.axes.searched
    refuse_impossible(specs)  # what the spec alone shows cannot run: exit 2 before anything runs (dlbench.refusals)
    if searched and any(s.device == "cpu" and s.memory_limit_bytes is None for s in specs):
        raise SpecError(
            f"--param {searched}=max on the CPU needs --memory-limit (the emulated device budget; "
            "the search must not fill this machine's memory)"
        )
    launchers = Launchers.build(req.hosts)
    placeable(specs, launchers, req.force)
    notes = tuple(dict.fromkeys(n for s in specs if (n := budget_note(s, req.shared.converge_steps))))
    store = Store.open(req.store_path, defer=True)  # checked, not written: WAL, migration and recovery at execute
    return PreparedRun(req, tuple(specs), searched, launchers, store, notes)


def execute_run(prepared: PreparedRun, hooks: RunHooks = RunHooks()) -> RunOutcome:
    """Search where asked, add the 1-device baselines the store lacks, run every point into one stored run (a
    failed point is recorded and the run goes on; Ctrl-C marks the run interrupted and propagates)."""
    req, store, launchers = prepared.request, prepared.store, prepared.launchers
    store.take_back()  # what an earlier writer could not store, before this run's first point (prepare wrote none)
    specs = list(prepared.specs)
    for line in prepared.notes:
        hooks.note(line)
    first = specs[0]
    failed: list[PointResult] = []
    extras: dict[str, dict[str, object]] = {}
    if prepared.searched:
        specs, failed, extras = search_param(store, specs, prepared.searched, launchers, hooks.note, req.command)
    # Speedup needs the 1-device throughput of the same configuration: measure it first where the store has none.
    # A model-parallel (or Partial FC) maximum outgrows one device by design: no baseline for it (scaling.py).
    want = [s for s in specs if not (s.key() in extras and get_case(s.model).configured(s.params).splits_model)]
    specs = [*missing_baselines(store.points(), want, host_identity(first.device, physical_cores())), *specs]
    run_id = store.create_run(
        req.command, kind="run", meta={"preset": first.protocol.preset, "points": len(specs) + len(failed)}
    )
    for r in failed:  # a search where nothing fits: kept with its request, as every point is
        store.add_point(run_id, attach_request(store, run_id, r, interpreter_for(r.spec.framework, r.spec.release)))
    hooks.starting()
    references = missing_references(store.points(), specs)  # measured once, then reused (#34)
    for line in converge.plan_lines(references, specs):
        hooks.note(line)
    try:
        with hooks.progress(len(references) + len(specs)) as ui:
            if ui and references:
                ui.note(f"{len(references)} reference runs, then points")
            results = converge.measure_references(
                store, run_id, references, launchers, ui.started if ui else None, ui.done if ui else None
            )
            if ui and references:
                ui.note("points")
            n = len(references)
            results += run_points(
                store,
                run_id,
                specs,
                launchers,
                started=(lambda i, s: ui.started(i + n, s)) if ui else None,
                done=(lambda i, r: ui.done(i + n, r)) if ui else None,
                extras=extras,
                wait_quiet_s=req.wait_quiet,
                price_per_hour=req.price_per_hour,
                finish=lambda r: with_verdict(r, store.points(models=[r.spec.model])),
            )
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        hooks.interrupted(run_id)
        raise
    store.finish_run(run_id, "done")
    return RunOutcome(run_id, store.path, (*failed, *results), tuple(store.points()), first.protocol)
