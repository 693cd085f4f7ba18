"""The child process that runs one point: ``<python> -m dlbench.worker SPEC.json RESULT.json``.

It imports the framework (the controller never does), refuses what cannot run here, builds the point and measures
it with the protocol (worker/measure.py), and writes a `WorkerResult` (dlbench.wire), or the one-line reason the
point failed. Progress goes to stdout as progress lines. It imports nothing from dlbench.launch.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from dlbench.records import Status
from dlbench.spec import PointSpec
from dlbench.wire import RankContext, WorkerResult, configure_rank, rank_result_path
from dlbench.worker.measure import converge, environment, own_memory_sampler, rank_result, timed_steps

if TYPE_CHECKING:
    from dlbench.backends.base import Backend
    from dlbench.evaluate import Checkpoints


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


def _used_share(backend: Backend) -> float | None:
    """The backend's used share of its device's memory; None where reading it fails too."""
    try:
        return backend.memory_used_share()
    except Exception:
        return None


def _stopped(backend: Backend, spec: PointSpec, ctx: RankContext, curve: dict[str, object], when: str) -> WorkerResult:
    """The result of a convergence point stopped by Ctrl-C (the controller passes it on): an error with no
    throughput, keeping the curve for the controller to judge and store (`interrupted` where it had not reached
    its target)."""
    from dlbench.analysis.convergence import CURVE_KEY

    return WorkerResult(
        status="error",
        error=f"stopped by Ctrl-C {when}, after {curve['steps']} steps of its loss curve: the curve is kept",
        env=environment(backend, spec, ctx),
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
        env=environment(backend, spec, ctx),
    )


def _run(spec: PointSpec, ctx: RankContext, backend: Backend, retried: bool = False) -> WorkerResult:
    """One try of `run`; `retried`: the second, where cuDNN's "no valid algorithm" with the memory nearly full
    reads as out of memory."""
    from dlbench.backends.base import Unsupported
    from dlbench.cases import get_case

    case = get_case(spec.model).configured(spec.params)
    reason = refusal(backend, spec, ctx)
    if reason:
        return WorkerResult(status="unsupported", error=reason, env=environment(backend, spec, ctx))
    curve: dict[str, object] | None = None
    checkpoints = _checkpoints(spec, ctx)
    with own_memory_sampler(spec, ctx) as sampler:
        try:
            trainer = backend.build(spec, case, ctx)
            curve = converge(trainer, spec, case, ctx.rank) if spec.converge else None  # trains first: the curve (#34)
            if curve is not None and curve["interrupted"]:  # Ctrl-C while it trained: its curve so far, no throughput
                return _stopped(backend, spec, ctx, curve, "while its loss curve trained")
            if checkpoints is not None and not isinstance(checkpoints, dict):
                checkpoints.save(trainer, "target")  # the weights where the curve stopped (#44)
            timed = timed_steps(backend, trainer, spec, ctx, checkpoints)
        except Unsupported as exc:
            return WorkerResult(status="unsupported", error=str(exc), env=environment(backend, spec, ctx))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and curve is not None:  # its whole curve, judged as it is
                return _stopped(backend, spec, ctx, curve, "while its throughput was measured")
            if isinstance(exc, KeyboardInterrupt):
                raise
            return _failed(backend, spec, ctx, exc, retried)
    return rank_result(backend, spec, ctx, timed, sampler, curve, checkpoints)


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
