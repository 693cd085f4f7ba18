"""Run one point where its spec says, and turn what the child(ren) left into a PointResult."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

from dlbench.launch.worker_process import ChildOutcome, ProgressSink, run_local
from dlbench.protocol.stats import summarize
from dlbench.results.env import host_descriptive, host_identity, physical_cores
from dlbench.results.schema import Environment, PointResult, RankRaw
from dlbench.spec import PointSpec

# A launcher runs a spec with an interpreter and returns how its child(ren) ended, every rank included.
Launcher = Callable[[PointSpec, str, ProgressSink | None], ChildOutcome]

LAUNCHERS: dict[str, Launcher] = {"local": lambda spec, python, progress: run_local(spec, python, progress)}


def register_launcher(name: str, launcher: Launcher) -> None:
    """Make a launcher available under name (for --launcher)."""
    LAUNCHERS[name] = launcher


def environment(spec: PointSpec, worker_env: dict[str, str]) -> Environment:
    """Identity and descriptive keys: the host's, then what the worker's framework reported."""
    ident = host_identity(spec.device, spec.threads or physical_cores())
    ident["framework"] = spec.framework
    desc = host_descriptive()
    desc["launcher"] = spec.launcher
    desc["nodes"], desc["devices_per_node"] = str(spec.nodes), str(spec.devices_per_node)
    for k, v in worker_env.items():
        (ident if k in {"framework_version", "device_model", "cuda", "cudnn", "nccl"} else desc)[k] = str(v)
    return Environment(identity=ident, descriptive=desc)


def outcome_to_result(spec: PointSpec, outcome: ChildOutcome, started: float) -> PointResult:
    """Derive metrics from the raw samples of a finished child; failures keep their status and error."""
    payload = outcome.payload
    env = environment(spec, dict(payload.get("env") or {}))  # type: ignore[arg-type]
    ranks = tuple(RankRaw.from_dict(r) for r in payload.get("ranks") or [])  # type: ignore[union-attr]
    extra: dict[str, object] = dict(payload.get("extra") or {})  # type: ignore[arg-type]
    if outcome.tail and outcome.status != "ok":
        extra["tail"] = outcome.tail
    status, error, metrics = outcome.status, outcome.error, None
    if status == "ok":
        metrics = summarize(spec, ranks)
        if metrics.final_loss is None or not math.isfinite(metrics.final_loss):
            status, error = "failed_check", f"final loss is not finite: {metrics.final_loss}"
    return PointResult(spec=spec, status=status, ranks=ranks, metrics=metrics, env=env,  # type: ignore[arg-type]
                       error=error, started=started, finished=time.time(), extra=extra)


def execute(spec: PointSpec, python: str = sys.executable,
            on_progress: ProgressSink | None = None) -> PointResult:
    """Run a point with its launcher and return its result; never raises for a failed point."""
    started = time.time()
    if spec.launcher not in LAUNCHERS:
        outcome = ChildOutcome("error", error=f"unknown launcher {spec.launcher!r}; known: {', '.join(LAUNCHERS)}")
    else:
        outcome = LAUNCHERS[spec.launcher](spec, python, on_progress)
    return outcome_to_result(spec, outcome, started)
