"""The child process that runs one point: ``<python> -m dlbench.worker SPEC.json RESULT.json``.

It imports the framework (the controller never does), measures with the protocol, and writes a result
JSON. Progress goes to stdout as lines starting with PROGRESS_PREFIX.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
import traceback
from pathlib import Path

PROGRESS_PREFIX = "@@dlbench "
RESULT_VERSION = 1


def _peak_rss_bytes() -> int:
    """This process's peak resident set size (ru_maxrss is in KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


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
        sys.stdout.write(PROGRESS_PREFIX + json.dumps({"phase": phase, "repeat": repeat, "step": step,
                                                       "total": total}) + "\n")
        sys.stdout.flush()


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


def _write(path: Path, payload: dict[str, object]) -> None:
    payload["result_version"] = RESULT_VERSION
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def run(spec_json: str, rank: int = 0) -> dict[str, object]:
    """Build, measure and describe one point in this process; returns the result payload."""
    from dlbench.backends import load_backend
    from dlbench.cases import get_case
    from dlbench.launch.ranks import ChecksumTrainer
    from dlbench.protocol.runner import measure
    from dlbench.results.env import node_topology
    from dlbench.spec import PointSpec

    spec = PointSpec.from_json(spec_json)
    case = get_case(spec.model)
    backend = load_backend(spec.framework)
    env = backend.environment(spec)
    if spec.world_size > 1:
        env.update(node_topology(spec.device))
    reason = backend.case_support(case) or backend.refuse(spec)
    if reason:
        return {"status": "unsupported", "error": reason, "env": env}
    try:
        trainer = backend.build(spec, case)
        trainer.reset_input_wait()
        repeats = measure(trainer, spec.protocol, progress=_Progress() if rank == 0 else (lambda *a: None))
        wait = trainer.input_wait_s()
        loss = trainer.loss()
        peak = trainer.peak_memory_bytes()
        # Ranks must hold identical parameters after the timed steps: the launcher compares these.
        checksum = trainer.param_checksum() if spec.world_size > 1 and isinstance(trainer, ChecksumTrainer) else None
        trainer.close()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded status
        if isinstance(exc, KeyboardInterrupt):
            raise
        status = "oom" if backend.is_oom(exc) else "error"
        tail = traceback.format_exc().strip().splitlines()[-12:]
        return {"status": status, "error": f"{type(exc).__name__}: {exc}".strip()[:2000],
                "traceback": tail, "env": env}
    rank_raw = {
        "rank": rank,
        "repeats": [{"step_times": list(r.step_times), "wall_s": r.wall_s} for r in repeats],
        "peak_memory_bytes": peak if peak is not None else _peak_rss_bytes(),
        "memory_kind": "cuda_max_allocated" if peak is not None else "rss",
        "final_loss": loss,
        "input_wait_s": wait,
    }
    if checksum is not None:
        rank_raw["param_checksum"] = checksum
    if not math.isfinite(loss):
        return {"status": "failed_check", "error": f"final loss is not finite: {loss}", "ranks": [rank_raw],
                "env": env}
    return {"status": "ok", "ranks": [rank_raw], "env": env, "extra": backend.finish()}


def main(argv: list[str] | None = None) -> int:
    """Entry point: read the spec file, write the result file; exit 0 when a result was written."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    from dlbench.launch.ranks import configure_rank, rank_result_path
    from dlbench.spec import PointSpec

    _die_with_parent()
    spec_path, out_path = Path(args[0]), Path(args[1])
    spec_json = spec_path.read_text()
    spec = PointSpec.from_json(spec_json)
    rank = configure_rank(spec, os.environ)  # torchrun, Slurm and MPI name ranks differently; before any import
    payload = run(spec_json, rank=rank)
    _write(rank_result_path(out_path, rank) if spec.world_size > 1 else out_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
