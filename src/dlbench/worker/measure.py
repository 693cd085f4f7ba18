"""What a point's worker measures and how it describes it: the convergence curve, the protocol's timed steps
(with throttled progress lines for the controller), then the rank's raw record (its peak memory, the steps'
calibration, the framework's facts and environment) as the `WorkerResult` the controller merges and judges."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import resource
import sys
import time
from typing import TYPE_CHECKING

from dlbench.spec import PointSpec
from dlbench.wire import (
    CONTROLLER_MEMORY,
    RANK_GPU,
    RankContext,
    WorkerResult,
    edge_event,
    progress_line,
    watched_by_controller,
)

if TYPE_CHECKING:
    from dlbench.backends.base import AllocatorPeak, Backend, Trainer
    from dlbench.cases import Case
    from dlbench.evaluate import Checkpoints
    from dlbench.machine.gpu_watch import GpuSampler
    from dlbench.protocol.runner import Measured


def _peak_rss_bytes() -> int:
    """This process's own peak resident set size: VmHWM, its address space's high-water mark, on Linux.

    Not ru_maxrss: Linux keeps that across fork and exec, so a worker started by a controller that once held
    1.5 GiB reports 1.5 GiB however little it used itself, and an emulated memory limit refuses every probe.
    ru_maxrss (KiB on Linux, bytes on macOS) only where /proc is absent.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    maxrss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return maxrss if sys.platform == "darwin" else maxrss * 1024


class _Progress:
    """Throttled progress lines on stdout, so that reporting costs nothing measurable."""

    def __init__(self, min_interval: float = 0.25) -> None:
        self.min_interval = min_interval
        self.last = 0.0

    def __call__(self, phase: str, repeat: int, step: int, total: int) -> None:
        now = time.monotonic()
        if step != total and now - self.last < self.min_interval:
            return
        self.last = now
        sys.stdout.write(progress_line({"phase": phase, "repeat": repeat, "step": step, "total": total}) + "\n")
        sys.stdout.flush()


class _CurveProgress:
    """A convergence run's progress lines (phase "converge": steps of its budget, the loss read, the target),
    throttled as _Progress is; the last reading before the target or the budget always goes out."""

    def __init__(self, budget: int, target: float, target_auc: float | None = None, min_interval: float = 0.25) -> None:
        self.budget, self.target, self.target_auc = budget, target, target_auc
        self.min_interval = min_interval
        self.last = 0.0

    def __call__(self, steps: int, loss: float, auc: float | None = None) -> None:
        now = time.monotonic()
        reached = loss <= self.target if auc is None else auc >= (self.target_auc or 0.0)
        if now - self.last < self.min_interval and steps < self.budget and not reached:
            return
        self.last = now
        event: dict[str, object] = {"phase": "converge", "repeat": 0, "step": steps, "total": self.budget}
        event["loss"] = loss if math.isfinite(loss) else str(loss)
        if auc is None:
            event["target"] = self.target
        else:  # judged by its held-out AUC (a DLRM): the bar shows it against its target
            event["auc"], event["target_auc"] = auc, self.target_auc
        sys.stdout.write(progress_line(event) + "\n")
        sys.stdout.flush()


def _silent(phase: str, repeat: int, step: int, total: int) -> None:
    return None


def _edge(edge: str, repeat: int, total: int) -> None:
    """A measured repeat's first or last clock read, told to the controller at once (never throttled)."""
    sys.stdout.write(progress_line(edge_event(edge, repeat, total)) + "\n")
    sys.stdout.flush()


def _no_edge(edge: str, repeat: int, total: int) -> None:
    return None


def own_memory_sampler(spec: PointSpec, ctx: RankContext) -> contextlib.AbstractContextManager[GpuSampler | None]:
    """A rank the controller cannot see (another host) samples its own device(s) memory; else nothing."""
    if spec.device != "cuda" or watched_by_controller(os.environ):
        return contextlib.nullcontext(None)
    from dlbench.machine.gpu_watch import gpu_sampler, rank_devices
    from dlbench.machine.nvml import session, visible_handles

    with session() as nv:
        visible = len(visible_handles(nv)) if nv is not None else 0
    devices = rank_devices(visible, spec.processes, spec.devices_per_node, [(ctx.rank, ctx.local_rank)])
    me = os.getpid()
    return gpu_sampler(devices, lambda pid: pid == me, interval_s=0.05)


def environment(backend: object, spec: PointSpec, ctx: RankContext | None = None) -> dict[str, str]:
    """The backend's facts about the framework, plus this node's topology on several ranks and, on a GPU, the one
    this rank ran on as NVML names it here (`rank_gpu`, the max-batch cache's device; `device_model` where the
    backend gives none) with its MIG mode; never raises."""
    from dlbench.machine.env import node_topology

    try:
        env = dict(backend.environment(spec))  # type: ignore[attr-defined]
    except Exception as exc:
        env = {"environment_error": f"{type(exc).__name__}: {exc}"[:300]}
    if spec.device == "cuda" and ctx is not None:
        from dlbench.backends.gpu_arch import rank_gpu

        gpu = rank_gpu(ctx)
        if gpu:
            env[RANK_GPU] = gpu["name"]
            env.setdefault("device_model", gpu["name"])
            env["gpu_mig"] = gpu["mig"]
    if spec.world_size > 1:
        env.update(node_topology(spec.device))
    return env


def _ptx_jit(backend: Backend, spec: PointSpec, ctx: RankContext) -> str | None:
    """That this rank's GPU runs the build's PTX, JIT-compiled (backends/gpu_arch.ptx_jit), or None."""
    if spec.device != "cuda":
        return None
    from dlbench.backends.gpu_arch import rank_ptx_jit

    try:
        return rank_ptx_jit(backend.gpu_build(), ctx)
    except Exception:
        return None


def converge(trainer: Trainer, spec: PointSpec, case: Case, rank: int = 0) -> dict[str, object]:
    """Train to the case's convergence target (analysis/targets.py) and return the curve and target as facts;
    rank 0 prints a progress line per reading (throttled)."""
    from dlbench.analysis.targets import target_for
    from dlbench.protocol.converge import train_curve

    target = target_for(case, spec.converge_steps, spec.converge_target)
    if target is None:  # refusals.py refuses this before the worker; a point reaching it another way fails here
        raise RuntimeError(f"--converge has no target for {spec.model}")
    trainer.keep_loss_window = True
    scorer = trainer.held_out_auc if target.auc is not None else None  # a DLRM is judged by AUC (#47)
    progress = _CurveProgress(target.budget, target.loss, target.auc) if rank == 0 else None
    curve = train_curve(
        trainer,
        target.budget,
        target.every,
        target.loss,
        seed=spec.seed,
        evaluate=scorer,
        target_auc=target.auc,
        progress=progress,
    )
    trainer.keep_loss_window = False
    return {**curve.to_dict(), "target": target.to_dict()}


def _peak_memory(spec: PointSpec, ctx: RankContext, sampler: GpuSampler | None) -> tuple[int | None, str]:
    """This rank's peak memory and its kind: the process' RSS off the GPU; on a GPU the rank's sampler's reading,
    or none where the controller samples the device from outside (CONTROLLER_MEMORY)."""
    if spec.device != "cuda":
        return _peak_rss_bytes(), "rss"
    if sampler is None:
        return None, CONTROLLER_MEMORY
    return sampler.rank_memory(ctx.rank)


def _steps_facts(spec: PointSpec, measured: Measured, calibrate: bool) -> dict[str, object]:
    """What the protocol's calibration did to the steps per repeat, or why it could not."""
    if measured.calibrated:
        return {
            "steps_raised": f"{measured.steps_asked} -> {measured.steps} measured steps per repeat, so that a "
            f"repeat lasts at least {spec.protocol.on(spec.device).min_time_s:g} s"
        }
    if not calibrate and spec.protocol.on(spec.device).min_time_s > 0:
        return {
            "steps_not_calibrated": f"{spec.framework}'s ranks cannot agree on a step count here: each repeat "
            f"measured the protocol's {measured.steps} steps, not a minimum time"
        }
    return {}


@dataclasses.dataclass(frozen=True)
class Timed:
    """What one try measured: the protocol's windows (and whether it could calibrate them), the final loss, the
    allocator's peak, the checksums the controller compares, and the backend's facts."""

    measured: Measured
    calibrate: bool
    loss: float
    allocator: AllocatorPeak | None
    checksum: float | None
    replicas: list[float] | None
    facts: dict[str, object]


def timed_steps(
    backend: Backend,
    trainer: Trainer,
    spec: PointSpec,
    ctx: RankContext,
    checkpoints: Checkpoints | dict[str, object] | None,
) -> Timed:
    """The protocol's timed steps on a built trainer, then what is read after them; the trainer is closed."""
    from dlbench.protocol.runner import measure

    progress = _Progress() if ctx.rank == 0 else _silent
    # Several ranks calibrate only through a trainer that makes them agree on rank 0's step count.
    calibrate = spec.processes == 1 or trainer.agrees_steps
    measured = measure(
        trainer,
        spec.protocol.on(spec.device),
        progress=progress,
        sync_every_step=spec.sync_every_step,
        calibrate=calibrate,
        agree=trainer.agree_steps,
        window_edge=_edge if ctx.rank == 0 else _no_edge,
    )
    loss = trainer.loss()
    allocator = trainer.allocator_peak()
    checksum = trainer.param_checksum() if spec.processes > 1 else None
    replicas = trainer.replica_checksums() if spec.processes == 1 and spec.world_size > 1 else None
    if checkpoints is not None and not isinstance(checkpoints, dict):
        checkpoints.save(trainer, "end")  # and after the timed steps
    trainer.close()
    facts = dict(backend.facts())  # after timing; a collective here (MoE counters) fails as the point
    return Timed(measured, calibrate, loss, allocator, checksum, replicas, facts)


def rank_result(
    backend: Backend,
    spec: PointSpec,
    ctx: RankContext,
    timed: Timed,
    sampler: GpuSampler | None,
    curve: dict[str, object] | None,
    checkpoints: Checkpoints | dict[str, object] | None,
) -> WorkerResult:
    """The rank's raw measurement and facts; with a loss curve, its evaluation; a non-finite loss fails the check."""
    from dlbench.records import RankRaw

    peak, kind = _peak_memory(spec, ctx, sampler)
    raw = RankRaw(
        rank=ctx.rank,
        repeats=timed.measured.repeats,
        peak_memory_bytes=peak,
        memory_kind=kind,
        final_loss=timed.loss,
        input_wait_s=timed.measured.input_wait_s,
        param_checksum=timed.checksum,
        allocator_peak_bytes=timed.allocator.bytes if timed.allocator else None,
        allocator_kind=timed.allocator.kind if timed.allocator else "",
        device_timer=timed.measured.device_timer,
    )
    facts = timed.facts
    jit = _ptx_jit(backend, spec, ctx)
    if jit:
        facts["ptx_jit"] = jit
    if timed.replicas is not None:  # compared by the controller (launch/merge.py), as ranks' checksums are
        facts["replica_checksums"] = timed.replicas
    facts.update(_steps_facts(spec, timed.measured, timed.calibrate))
    if sampler is not None and sampler.errors:
        facts["nvml_memory_errors"] = f"{sampler.errors} failed NVML call(s), the last: {sampler.error}"
    env = environment(backend, spec, ctx)
    if curve is not None:  # judged by the controller against its reference; a NaN there reads `diverged`
        from dlbench.analysis.convergence import CURVE_KEY, EVAL_KEY

        facts[CURVE_KEY] = curve
        if isinstance(checkpoints, dict):  # why there is no evaluation
            facts[EVAL_KEY] = checkpoints
        elif checkpoints is not None:  # the fresh process that evaluates the saved weights on held-out data (#44)
            facts[EVAL_KEY] = checkpoints.evaluate(spec)
            checkpoints.close()
        return WorkerResult(status="ok", ranks=[raw], env=env, facts=facts)
    if not math.isfinite(timed.loss):
        return WorkerResult(
            status="failed_check", error=f"final loss is not finite: {timed.loss}", ranks=[raw], env=env, facts=facts
        )
    return WorkerResult(status="ok", ranks=[raw], env=env, facts=facts)
