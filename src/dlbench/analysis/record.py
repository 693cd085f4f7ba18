"""A point's stored record from what its worker(s) reported: environment split into identity and descriptive
keys, every metric derived from the raw samples (protocol/stats.py), and the device peak an ok point is judged
against (analysis/mfu.py: stored now, so that its MFU never changes when read), in one place."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from dlbench.analysis.mfu import PEAK_KEY, stored_peak
from dlbench.machine.env import IDENTITY_KEYS, host_descriptive, host_identity, physical_cores
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult
from dlbench.spec import PointSpec
from dlbench.wire import WorkerResult


def environment(spec: PointSpec, worker_env: Mapping[str, str]) -> Environment:
    """Identity and descriptive keys: the host's, then what the worker's framework reported."""
    ident = host_identity(spec.device, spec.threads or physical_cores())
    ident["framework"] = spec.framework
    desc = host_descriptive(spec.device)
    desc["launcher"] = spec.launcher
    desc["nodes"], desc["devices_per_node"] = str(spec.nodes), str(spec.devices_per_node)
    for k, v in worker_env.items():
        (ident if k in IDENTITY_KEYS else desc)[k] = str(v)
    return Environment(identity=ident, descriptive=desc)


def point_result(
    spec: PointSpec, status: str, worker: WorkerResult | None, error: str | None, tail: Sequence[str], started: float
) -> PointResult:
    """The stored record of a finished point; metrics only for an ok point (the worker checked its loss)."""
    ranks = tuple(worker.ranks) if worker is not None else ()
    extra: dict[str, object] = dict(worker.facts) if worker is not None else {}
    if tail and status != "ok":
        extra["tail"] = list(tail)
    metrics = summarize(spec, ranks) if status == "ok" else None
    env = environment(spec, worker.env if worker is not None else {})
    if status == "ok":
        extra[PEAK_KEY] = stored_peak(spec, env.identity, env.descriptive)
    return PointResult(
        spec=spec,
        status=status,  # type: ignore[arg-type]
        ranks=ranks,
        metrics=metrics,
        env=env,
        error=error,
        started=started,
        finished=time.time(),
        extra=extra,
    )
