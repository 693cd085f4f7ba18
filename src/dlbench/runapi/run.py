"""The run API under `dlbench run`: a frozen request in; its points prepared (every check made before anything is
written) and executed into one stored run, each committed as it ends; an outcome out that the command only renders."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dlbench.analysis.record import point_result
from dlbench.analysis.scaling import Scaled, missing_baselines, scaled
from dlbench.cases import get_case
from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.bounds import check_bounds
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.lock import attach_request
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import NAMES, Launchers
from dlbench.launch.session import run_points
from dlbench.machine.env import host_identity, physical_cores
from dlbench.records import PointResult, exit_code
from dlbench.refusals import refuse_impossible
from dlbench.runapi import converge
from dlbench.runapi.options import build_specs, parse_params, protocol_from, require_gpu, with_layout
from dlbench.spec import PointSpec, SpecError
from dlbench.spec import Protocol as MeasureProtocol
from dlbench.store.rows import StoredPoint
from dlbench.store.store import Store
from dlbench.suite.maxbatch import param_bounds, search

LAUNCHER_NAMES: tuple[str, ...] = NAMES  # for the commands' help: where points can run


@dataclass(frozen=True)
class RunRequest:
    """What `dlbench run` is asked to measure, as its options say (None: the default applies)."""

    framework: str | None = None
    model: str | None = None
    batch_size: str | None = None
    precision: str | None = None
    compile_: bool = False
    channels_last: bool = False
    device: str = "auto"
    preset_name: str = "quick"
    warmup: int | None = None
    steps: int | None = None
    repeats: int | None = None
    statistic: str | None = None
    timeout: float = 1800.0
    input_size: int | None = None
    threads: int | None = None
    data: str = "synthetic"
    data_dir: str | None = None
    scale: str | None = None
    nodes: int | None = None
    devices_per_node: int | None = None
    strategy: str = "none"
    launcher: str | None = None
    hosts: str | None = None
    reach: str | None = None
    master_addr: str | None = None
    rendezvous_timeout: float = 300.0
    memory_limit: str | None = None
    params: tuple[str, ...] = ()
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    pipeline_schedule: str = "1f1b"
    recompute: bool = False
    fsdp: bool = False
    context_parallel: int = 1
    expert_parallel: int = 1
    routing: str = "learned"
    converge: bool = False  # train learnable data to a target first and judge the curve (#34, runapi/converge.py)
    converge_steps: int | None = None
    converge_target: float | None = None
    sync_every_step: bool = False
    bucket_mb: int | None = None
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
    """Build and check every point (SpecError or a one-line refusal before anything is written), and open the
    store."""
    specs = build_specs(
        framework=req.framework,
        model=req.model,
        batch_size=req.batch_size,
        precision=req.precision,
        compile_=req.compile_,
        channels_last=req.channels_last,
        device=req.device,
        protocol=protocol_from(req.preset_name, req.warmup, req.steps, req.repeats, req.statistic),
        timeout=req.timeout,
        input_size=req.input_size,
        threads=req.threads,
        data=req.data,
        data_dir=req.data_dir,
        scale=req.scale,
        nodes=req.nodes,
        devices_per_node=req.devices_per_node,
        strategy=req.strategy,
        launcher=req.launcher or "local",
        memory_limit=req.memory_limit,
        params=req.params,
    )
    specs = with_layout(
        specs,
        req.tensor_parallel,
        req.pipeline_parallel,
        req.micro_batches,
        req.pipeline_schedule,
        req.recompute,
        round_batch=req.batch_size is None,
    )
    specs = [
        dataclasses.replace(
            s,
            layout=dataclasses.replace(
                s.layout,
                fsdp=req.fsdp,
                context_parallel=req.context_parallel,
                expert_parallel=req.expert_parallel,
                routing=req.routing,
            ),
        )
        for s in specs
    ]
    if req.sync_every_step:
        specs = [dataclasses.replace(s, sync_every_step=True) for s in specs]
    if req.converge:
        specs = [
            dataclasses.replace(
                s, converge=True, converge_steps=req.converge_steps, converge_target=req.converge_target
            )
            for s in specs
        ]
    if req.bucket_mb is not None:  # checked by the spec: only strategies with buckets take it
        specs = [dataclasses.replace(s, layout=dataclasses.replace(s.layout, bucket_mb=req.bucket_mb)) for s in specs]
    refuse_impossible(specs)  # what the spec alone shows cannot run: exit 2 before anything runs (dlbench.refusals)
    searched = parse_params(req.params)[1]
    if searched and any(s.device == "cpu" and s.memory_limit_bytes is None for s in specs):
        raise SpecError(
            f"--param {searched}=max on the CPU needs --memory-limit (the emulated device budget; "
            "the search must not fill this machine's memory)"
        )
    launchers = Launchers.build(HostsConfig.from_options(req.hosts, req.reach, req.master_addr, req.rendezvous_timeout))
    if req.launcher is None:
        specs = [dataclasses.replace(s, launcher=Launchers.default_for(s)) for s in specs]
    for s in specs:
        launchers.check(s)
    require_gpu(specs, req.hosts)
    check_bounds(specs, req.force, remote_hosts=bool(launchers.config.hosts))  # no fork bomb from a typo
    for fw in {s.framework for s in specs}:
        interpreter_for(fw)  # refuse a missing framework before anything is written
    return PreparedRun(req, tuple(specs), searched, launchers, Store(req.store_path))


def execute_run(prepared: PreparedRun, hooks: RunHooks = RunHooks()) -> RunOutcome:
    """Search where asked, add the 1-device baselines the store lacks, run every point into one stored run (a
    failed point is recorded and the run goes on; Ctrl-C marks the run interrupted and propagates)."""
    req, store, launchers = prepared.request, prepared.store, prepared.launchers
    specs = list(prepared.specs)
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
        req.command, kind="run", meta={"preset": req.preset_name, "points": len(specs) + len(failed)}
    )
    for r in failed:  # a search where nothing fits: kept with its request, as every point is
        store.add_point(run_id, attach_request(store, run_id, r, interpreter_for(r.spec.framework)))
    hooks.starting()
    references = converge.missing_references(store.points(), specs)  # measured once, then reused (#34)
    try:
        with hooks.progress(len(references) + len(specs)) as ui:
            results = converge.measure_references(
                store, run_id, references, launchers, ui.started if ui else None, ui.done if ui else None
            )
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
                finish=lambda r: converge.with_verdict(r, store.points(models=[r.spec.model])),
            )
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        hooks.interrupted(run_id)
        raise
    store.finish_run(run_id, "done")
    return RunOutcome(run_id, store.path, (*failed, *results), tuple(store.points()), first.protocol)


def search_param(
    store: Store,
    specs: Sequence[PointSpec],
    name: str,
    launchers: Launchers,
    note: Callable[[str], None] = lambda line: None,
    command: str = "",
) -> tuple[list[PointSpec], list[PointResult], dict[str, dict[str, object]]]:
    """--param NAME=max: search each configuration's largest value (suite/maxbatch.py, probes cached), then the
    points to measure at it, and the search's facts to keep with each (by spec key); a configuration where even
    the lower bound fails becomes a failed point. Each verdict is one line to `note`."""
    found_specs: list[PointSpec] = []
    failed: list[PointResult] = []
    extras: dict[str, dict[str, object]] = {}
    for spec in specs:
        lo, hi, unit = param_bounds(get_case(spec.model), name)
        found = search(
            store,
            spec,
            lo,
            hi,
            memory_limit=spec.memory_limit_bytes,
            python=interpreter_for(spec.framework),
            launchers=launchers,
            quantity=name,
            unit=unit,
            command=command,
        )
        label = f"{spec.framework} {spec.model} bs{spec.batch_size}"
        if found.max_batch is None:
            note(f"max {name} for {label}: none fits: {found.note}")
            none = point_result(
                spec, found.last.status, None, f"no {name} in [{lo}, {hi}) trains: {found.note}", [], time.time()
            )
            failed.append(dataclasses.replace(none, extra={**none.extra, found.extra_key: found.facts()}))
            continue
        how = f"exact within {unit:,}, reproduced when run again" if found.exact else found.note
        over = f", {found.fails_at:,} ran out of memory" if found.fails_at is not None else ""
        note(
            f"max {name} for {label}: {found.max_batch:,} trains{over} ({how}; {len(found.probes)} probes, "
            f"{found.new_probes} new)"
        )
        at_max = dataclasses.replace(spec, case_params=tuple(sorted({**spec.params, name: found.max_batch}.items())))
        found_specs.append(at_max)
        extras[at_max.key()] = {found.extra_key: found.facts()}
    return found_specs, failed, extras
