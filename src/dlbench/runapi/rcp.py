"""Measuring reference convergence points (#44), the request under `dlbench reference measure-convergence`: N
reference runs (torch fp32 on one device, seeds REFERENCE_SEED0 ..) of one configuration, each trained to its
target, evaluated independently and stored marked as a reference run; then one RCP (reference/rcp.py) of their
steps to target, with the hardware, versions, load and command that measured them, ready to ship as a file."""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlbench import __version__
from dlbench.analysis.convergence import EVAL_KEY, VERDICT_KEY
from dlbench.analysis.references import framework_version, key_of, reference_specs
from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.launch.registry import Launchers
from dlbench.machine.env import cpu_model, git_commit, gpus
from dlbench.points import Shared, point
from dlbench.records import PointResult
from dlbench.reference.rcp import Measured, Rcp, RcpRun
from dlbench.refusals import refuse_impossible
from dlbench.runapi import converge
from dlbench.runapi.gate import placeable
from dlbench.runapi.run import PointProgress
from dlbench.spec import Device, PointSpec, Protocol, SpecError
from dlbench.store.store import Store

MINIMAL = Protocol(warmup=1, steps=1, repeats=1, statistic="median", preset="custom")  # the throughput after it


@dataclass(frozen=True)
class RcpRequest:
    """One configuration to measure reference runs of, and how many."""

    model: str
    batch: int | None = None
    params: Mapping[str, int] = dataclasses.field(default_factory=dict)
    input_size: int | None = None
    runs: int = 5
    device: Device = "cpu"
    threads: int | None = None
    budget: int | None = None
    timeout_s: float = 7200.0
    store_path: str | None = None
    by: str = ""
    command: str = "dlbench reference measure-convergence"


@dataclass(frozen=True)
class RcpOutcome:
    """The stored reference runs and the point made of them."""

    run_id: str
    results: tuple[PointResult, ...]
    rcp: Rcp


def rcp_specs(req: RcpRequest) -> list[PointSpec]:
    """The reference runs a request asks for, built and gated as any run's points (a SpecError or a refusal, one
    line, before anything runs)."""
    case = get_case(req.model)
    if target_for(case.configured(dict(req.params))) is None:
        raise SpecError(f"{case.name} has no convergence target: no reference point can be measured")
    shared = Shared(
        protocol=MINIMAL,
        device=req.device,
        input_size=req.input_size,
        threads=req.threads,
        timeout_s=req.timeout_s,
        converge=True,
        converge_steps=req.budget,
    )
    base = point("torch", case, req.batch, "fp32", shared, req.params)
    specs = reference_specs(base, req.runs)
    refuse_impossible(specs)
    return specs


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return ""
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def measure_rcp(req: RcpRequest, progress: PointProgress | None = None) -> RcpOutcome:
    """Run the reference runs into one stored run (each marked a reference run) and make their RCP."""
    specs = rcp_specs(req)
    launchers = Launchers.build()
    placeable(specs, launchers, False)
    store = Store.open(req.store_path, recover=True)  # a writer about to store points: earlier ones' first
    run_id = store.create_run(req.command, kind="run", meta={"points": len(specs), "rcp": True})
    load_before = _load()
    try:
        results = converge.measure_references(
            store, run_id, specs, launchers, progress.started if progress else None, progress.done if progress else None
        )
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        raise
    store.finish_run(run_id, "done")
    return RcpOutcome(run_id, tuple(results), make_rcp(req, specs[0], results, f"{load_before} -> {_load()}"))


def _run_of(result: PointResult) -> RcpRun:
    raw: Any = result.extra.get(VERDICT_KEY, {})
    ev: Any = result.extra.get(EVAL_KEY, {})
    target = ev.get("target", {}) if isinstance(ev, dict) else {}
    steps = raw.get("steps_to_target") if raw.get("verdict") == "converged" else None
    wall = raw.get("wall_to_target_s")
    return RcpRun(
        seed=result.spec.seed,
        steps=steps,
        wall_s=round(float(wall), 2) if steps is not None and wall is not None else None,
        eval_loss=round(float(target["loss"]), 4) if isinstance(target.get("loss"), (int, float)) else None,
        eval_auc=round(float(target["auc"]), 4) if target.get("auc") is not None else None,
    )


def make_rcp(req: RcpRequest, first: PointSpec, results: list[PointResult], load: str) -> Rcp:
    """The point the reference runs make (its runs in seed order, a run whose verdict is not `converged` kept with
    no steps)."""
    case = get_case(first.model).configured(dict(first.case_params))
    target = target_for(case, first.converge_steps, first.converge_target)
    assert target is not None
    version = next((v for r in results if (v := framework_version(r))), "")
    device_name = gpus().devices[0]["name"] if first.device == "cuda" and gpus().devices else cpu_model()
    commit = git_commit()
    measured = Measured(
        by=req.by or "dlbench reference measure-convergence",
        date=datetime.date.today().isoformat(),
        hardware=f"{device_name} ({first.device})",
        device=first.device,
        framework=first.framework,
        framework_version=version,
        dlbench_version=f"{__version__}{' (' + commit + ')' if commit else ''}",
        threads=first.threads,
        load=f"load average {load} (steps to target do not depend on load; wall times do)",
        command=req.command,
    )
    return Rcp(
        key=key_of(first, target.loss),
        every=target.every,
        budget=target.budget,
        target_auc=target.eval_auc,
        measured=measured,
        runs=tuple(_run_of(r) for r in sorted(results, key=lambda r: r.spec.seed)),
    )
