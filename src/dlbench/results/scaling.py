"""Speedup and scaling efficiency, written down once.

    speedup    = throughput at N devices / throughput of the same configuration on 1 device
    efficiency = speedup / N

`scaling` is the arithmetic, shared by the report, `results` and `run`. The 1-device point is the newest ok
point of the same configuration (framework, model, batch per device, precision, data ...) at 1n1c with no
strategy whose identity keys match (`find_baseline`); `run` measures it first when the store has none
(`missing_baselines`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlbench.results.schema import PointResult
from dlbench.results.store import StoredPoint
from dlbench.spec import PointSpec


@dataclass(frozen=True)
class Scaling:
    """Speedup over the 1-device throughput, and that speedup per device."""

    speedup: float
    efficiency: float


def scaling(throughput: float, one_device_throughput: float, devices: int) -> Scaling:
    """Speedup = throughput / 1-device throughput; efficiency = speedup / devices."""
    if one_device_throughput <= 0:
        raise ValueError(f"the 1-device throughput must be > 0; got {one_device_throughput}")
    if devices < 1:
        raise ValueError(f"devices must be >= 1; got {devices}")
    speedup = throughput / one_device_throughput
    return Scaling(speedup=speedup, efficiency=speedup / devices)


# --- which 1-device point a multi-device point is measured against ---------------------------------------

# Identity keys that must match between a point and its 1-device baseline (threads and device count differ
# by design: ranks split a node's cores).
BASELINE_IDENTITY: tuple[str, ...] = ("framework", "framework_version", "device", "device_model", "cpu_model")
# Launchers that run a 1-device point on the machine (or first host) the user benchmarks from; Slurm runs it
# on a compute node, so a Slurm point is compared only with a Slurm baseline.
_HERE_LAUNCHERS: frozenset[str] = frozenset({"local", "torchrun", "mpirun", "hosts"})


def baseline_spec(spec: PointSpec) -> PointSpec:
    """The same configuration on 1 device: one node, one device, no strategy (nor its bucket size); local, or
    Slurm for Slurm."""
    launcher = "slurm" if spec.launcher == "slurm" else "local"
    return dataclasses.replace(spec, nodes=1, devices_per_node=1, strategy="none", launcher=launcher, bucket_mb=None)


def _match_key(spec: PointSpec) -> str:
    base = baseline_spec(spec)
    where = "here" if base.launcher in _HERE_LAUNCHERS else base.launcher
    return dataclasses.replace(base, launcher=where).key()


@dataclass(frozen=True)
class Scaled:
    """A multi-device point's scaling and the stored 1-device point it was measured against."""

    scaling: Scaling
    baseline: StoredPoint


def _candidates(points: Sequence[StoredPoint], spec: PointSpec, identity: Mapping[str, str]) -> list[StoredPoint]:
    want = _match_key(spec)
    return [p for p in points
            if p.result.status == "ok" and p.result.metrics is not None and p.result.spec.world_size == 1
            and _match_key(p.result.spec) == want
            and all(p.result.env.identity.get(k) == v for k, v in identity.items())]


def find_baseline(points: Sequence[StoredPoint], result: PointResult) -> StoredPoint | None:
    """The newest ok 1-device point of the same configuration whose identity keys match the result's."""
    identity = {k: result.env.identity[k] for k in BASELINE_IDENTITY if k in result.env.identity}
    return max(_candidates(points, result.spec, identity), key=lambda p: p.id, default=None)


def scaled(points: Sequence[StoredPoint], result: PointResult) -> Scaled | None:
    """Speedup and efficiency of an ok multi-device point against its baseline; None when either is missing."""
    if result.status != "ok" or result.metrics is None or result.spec.world_size == 1:
        return None
    base = find_baseline(points, result)
    if base is None or base.result.metrics is None:
        return None
    return Scaled(scaling(result.metrics.throughput, base.result.metrics.throughput, result.spec.world_size), base)


def missing_baselines(points: Sequence[StoredPoint], specs: Sequence[PointSpec],
                      host: Mapping[str, str]) -> list[PointSpec]:
    """1-device specs to measure first: those of multi-device specs that neither the store (on this host's
    identity keys) nor the list itself has."""
    out: list[PointSpec] = []
    have = {_match_key(s) for s in specs if s.world_size == 1}
    for spec in specs:
        if spec.world_size == 1 or _match_key(spec) in have:
            continue
        identity = {k: host[k] for k in ("device", "device_model", "cpu_model") if k in host}
        identity["framework"] = spec.framework
        if not _candidates(points, spec, identity):
            out.append(baseline_spec(spec))
            have.add(_match_key(spec))
    return out
