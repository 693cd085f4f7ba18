"""The child process that runs one point: ``<python> -m dlbench.worker SPEC.json RESULT.json``.

It imports the framework (the controller never does), measures with the protocol, and writes a `WorkerResult`
(dlbench.wire). Progress goes to stdout as progress lines. It imports nothing from dlbench.launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from dlbench.records import Status
from dlbench.spec import PointSpec
from dlbench.wire import (
    CONTROLLER_MEMORY,
    RANK_GPU,
    RankContext,
    WorkerResult,
    configure_rank,
    edge_event,
    progress_line,
    rank_result_path,
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


def _own_memory_sampler(spec: PointSpec, ctx: RankContext) -> contextlib.AbstractContextManager[GpuSampler | None]:
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


def _die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this worker when the process that started it dies, so that a
    `kill -9` of the controller (or of torchrun) leaves no worker training on. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _interruptible() -> None:
    """Take SIGINT back as Ctrl-C (KeyboardInterrupt), however the worker was started. A controller started as a
    shell's background job (`dlbench run ... &`) ignores SIGINT, and its workers inherited that, so the SIGINT it
    sends them on SIGTERM or Ctrl-C was lost: a convergence run trained on until the grace ran out (#41)."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


def _environment(backend: object, spec: PointSpec, ctx: RankContext | None = None) -> dict[str, str]:
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


def _oom(backend: object, exc: BaseException) -> bool:
    """Whether the backend calls exc out of memory; False when its check fails itself (an API this version of the
    framework lacks), so that the point keeps its error instead of losing its result."""
    try:
        return bool(backend.is_oom(exc))  # type: ignore[attr-defined]
    except Exception:
        return False


def _gpu_refusal(backend: object, spec: PointSpec, ctx: RankContext) -> str | None:
    """Why this rank's GPU cannot run the framework's build (no kernels for its architecture), or None."""
    if spec.device != "cuda":
        return None
    from dlbench.backends.gpu_arch import rank_refusal

    return rank_refusal(backend.gpu_build(), ctx)  # type: ignore[attr-defined]


def refusal(backend: Backend, spec: PointSpec, ctx: RankContext | None = None) -> str | None:
    """Why this point cannot run here (one line), or None: the capability table's rules (dlbench.refusals, what the
    spec alone shows), the case the backend builds, its GPU build's kernels for this rank's GPU, then what only the
    framework at hand can tell (`Backend.refuse`)."""
    from dlbench.cases import get_case
    from dlbench.refusals import refusal as spec_refusal

    return (
        spec_refusal(spec)
        or backend.case_support(get_case(spec.model).configured(spec.params))
        or _gpu_refusal(backend, spec, ctx or RankContext())
        or backend.refuse(spec)
    )


def _ptx_jit(backend: Backend, spec: PointSpec, ctx: RankContext) -> str | None:
    """That this rank's GPU runs the build's PTX, JIT-compiled (backends/gpu_arch.ptx_jit), or None."""
    if spec.device != "cuda":
        return None
    from dlbench.backends.gpu_arch import rank_ptx_jit

    try:
        return rank_ptx_jit(backend.gpu_build(), ctx)
    except Exception:
        return None


def _used_share(backend: Backend) -> float | None:
    """The backend's used share of its device's memory; None where reading it fails too."""
    try:
        return backend.memory_used_share()
    except Exception:
        return None


def _converge(trainer: Trainer, spec: PointSpec, case: Case, rank: int = 0) -> dict[str, object]:
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


def _stopped(backend: Backend, spec: PointSpec, ctx: RankContext, curve: dict[str, object], when: str) -> WorkerResult:
    """The result of a convergence point stopped by Ctrl-C (the controller passes it on): an error with no
    throughput, keeping the curve for the controller to judge and store (`interrupted` where it had not reached
    its target)."""
    from dlbench.analysis.convergence import CURVE_KEY

    return WorkerResult(
        status="error",
        error=f"stopped by Ctrl-C {when}, after {curve['steps']} steps of its loss curve: the curve is kept",
        env=_environment(backend, spec, ctx),
        facts={CURVE_KEY: curve},
    )


def _checkpoints(spec: PointSpec, ctx: RankContext) -> Checkpoints | dict[str, object] | None:
    """Where a convergence point's rank 0 saves the weights the independent evaluation reads (dlbench/evaluate.py);
    why there is no evaluation where no rank holds the whole model; None for other points and ranks."""
    if not spec.converge or ctx.rank != 0:
        return None
    lay = spec.layout
    if lay.splits_model or lay.fsdp or lay.expert_parallel > 1:
        return {"skipped": "the model is split across ranks: no rank holds its whole weights to evaluate"}
    from dlbench.cases import get_case
    from dlbench.evaluate import Checkpoints, unevaluated

    why = unevaluated(get_case(spec.model))
    if why is not None:  # a diffusion transformer's latents (#48)
        return {"skipped": why}

    return Checkpoints()


def run(spec: PointSpec, ctx: RankContext) -> WorkerResult:
    """Build, measure and describe one point in this process; once more with cuDNN autotuning off where the first
    try failed with cuDNN's "no valid algorithm" (backends/cudnn_fallback; one-process points only: a rank that
    tried again alone would leave its peers waiting in a collective)."""
    from dlbench.backends import cudnn_fallback, load_backend

    backend = load_backend(spec.framework)
    result = _run(spec, ctx, backend)
    if spec.processes > 1 or not cudnn_fallback.should_retry(result.status, result.error or "", backend.autotune_off):
        return result
    again = _run(spec, ctx, backend, retried=True)
    return again.model_copy(
        update={"facts": {**again.facts, cudnn_fallback.RETRIED: cudnn_fallback.retry_fact(result.error or "")}}
    )


def _failed(backend: Backend, spec: PointSpec, ctx: RankContext, exc: BaseException, retried: bool) -> WorkerResult:
    """A point that raised: out of memory (also cuDNN's "no valid algorithm" with the memory nearly full, on the
    retry) or an error, with the traceback's tail."""
    from dlbench.backends import cudnn_fallback

    status: Status = "oom" if _oom(backend, exc) else "error"
    if retried and status == "error" and cudnn_fallback.exhausted(str(exc), _used_share(backend)):
        status = "oom"
    tail = traceback.format_exc().strip().splitlines()[-12:]
    return WorkerResult(
        status=status,
        error=f"{type(exc).__name__}: {exc}".strip()[:2000],
        traceback=tail,
        env=_environment(backend, spec, ctx),
    )


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
class _Timed:
    """What one try measured: the protocol's windows (and whether it could calibrate them), the final loss, the
    allocator's peak, the checksums the controller compares, and the backend's facts."""

    measured: Measured
    calibrate: bool
    loss: float
    allocator: AllocatorPeak | None
    checksum: float | None
    replicas: list[float] | None
    facts: dict[str, object]


def _timed(
    backend: Backend,
    trainer: Trainer,
    spec: PointSpec,
    ctx: RankContext,
    checkpoints: Checkpoints | dict[str, object] | None,
) -> _Timed:
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
    return _Timed(measured, calibrate, loss, allocator, checksum, replicas, facts)


def _result(
    backend: Backend,
    spec: PointSpec,
    ctx: RankContext,
    timed: _Timed,
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
    env = _environment(backend, spec, ctx)
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


def _run(spec: PointSpec, ctx: RankContext, backend: Backend, retried: bool = False) -> WorkerResult:
    """One try of `run`; `retried`: the second, where cuDNN's "no valid algorithm" with the memory nearly full
    reads as out of memory."""
    from dlbench.backends.base import Unsupported
    from dlbench.cases import get_case

    case = get_case(spec.model).configured(spec.params)
    reason = refusal(backend, spec, ctx)
    if reason:
        return WorkerResult(status="unsupported", error=reason, env=_environment(backend, spec, ctx))
    curve: dict[str, object] | None = None
    checkpoints = _checkpoints(spec, ctx)
    with _own_memory_sampler(spec, ctx) as sampler:
        try:
            trainer = backend.build(spec, case, ctx)
            curve = _converge(trainer, spec, case, ctx.rank) if spec.converge else None  # trains first: the curve (#34)
            if curve is not None and curve["interrupted"]:  # Ctrl-C while it trained: its curve so far, no throughput
                return _stopped(backend, spec, ctx, curve, "while its loss curve trained")
            if checkpoints is not None and not isinstance(checkpoints, dict):
                checkpoints.save(trainer, "target")  # the weights where the curve stopped (#44)
            timed = _timed(backend, trainer, spec, ctx, checkpoints)
        except Unsupported as exc:
            return WorkerResult(status="unsupported", error=str(exc), env=_environment(backend, spec, ctx))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and curve is not None:  # its whole curve, judged as it is
                return _stopped(backend, spec, ctx, curve, "while its throughput was measured")
            if isinstance(exc, KeyboardInterrupt):
                raise
            return _failed(backend, spec, ctx, exc, retried)
    return _result(backend, spec, ctx, timed, sampler, curve, checkpoints)


def main(argv: list[str] | None = None) -> int:
    """Entry point: read the spec file, write the result file; exit 0 when a result was written."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    _die_with_parent()
    _interruptible()
    spec_path, out_path = Path(args[0]), Path(args[1])
    spec = PointSpec.from_json(spec_path.read_text())
    ctx = configure_rank(spec, os.environ)  # torchrun, Slurm and MPI name ranks differently; before any import
    if ctx.server >= 0:  # a parameter server beside the ranks: serves until every rank has written its result
        from dlbench.backends import load_backend

        results = [out_path] if spec.processes == 1 else [rank_result_path(out_path, r) for r in range(spec.processes)]
        load_backend(spec.framework).serve(spec, ctx, results)
        return 0
    result = run(spec, ctx)
    result.write(rank_result_path(out_path, ctx.rank) if spec.processes > 1 else out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
