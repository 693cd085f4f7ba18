"""Speedup and scaling efficiency, written down once.

    speedup    = throughput at N devices / throughput of the same configuration on 1 device
    efficiency = speedup / N

`scaling` is the arithmetic, shared by the report, `results` and `run`. The 1-device point is an ok point of the
same configuration (framework, model, batch per device, precision, data ...) at 1n1c with no strategy whose
identity keys match (`find_baseline`): one of the same run first, then one of the same protocol, then the newest;
`run` measures it first when the store has none (`missing_baselines`).

A speedup carries its evidence: the baseline's point, run, protocol and CV, and marks where it is weak
(`Scaled.marks`): a noisy baseline (or one of fewer than 3 repeats, whose noise is unknown), one from another run
(and how much older), one measured with another protocol, and an efficiency above 100%.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlbench.cases import UnknownCase, get_case
from dlbench.parallel import Layout
from dlbench.records import PointResult
from dlbench.spec import PointSpec, Protocol, SpecError
from dlbench.store.store import StoredPoint


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
    """The same configuration on 1 device: one node, one device, no strategy (nor its bucket size), no model
    split and no FSDP (the batch of one data-parallel replica, recomputation kept); local, or Slurm for Slurm."""
    launcher = "slurm" if spec.launcher == "slurm" else "local"
    return dataclasses.replace(
        spec,
        nodes=1,
        devices_per_node=1,
        strategy="none",
        launcher=launcher,
        layout=Layout(recompute=spec.layout.recompute),
    )


def _match_key(spec: PointSpec) -> str:
    base = baseline_spec(spec)
    where = "here" if base.launcher in _HERE_LAUNCHERS else base.launcher
    return dataclasses.replace(base, launcher=where).key()


@dataclass(frozen=True)
class Scaled:
    """A multi-device point's scaling, the stored 1-device point it was measured against, and the marks that say
    where that comparison is weak."""

    scaling: Scaling
    baseline: StoredPoint
    marks: tuple[str, ...] = ()

    @property
    def evidence(self) -> str:
        """'1-device point #12 (run R, protocol quick: 1 warm-up, 6 steps, 3 repeats, median; CV 2.1%; 4.5
        samples/s)'."""
        b = self.baseline.result
        m = b.metrics
        cv = (
            f"CV {m.cv:.1%}"
            if m is not None and m.cv is not None
            else f"n={len(m.repeat_throughputs)}: CV unknown"
            if m is not None
            else "CV unknown"
        )
        rate = f"{m.throughput:,.1f} samples/s" if m is not None else "no throughput"
        return (
            f"1-device point #{self.baseline.id} (run {self.baseline.run_id}, protocol "
            f"{describe_protocol(b.spec.protocol)}; {cv}; {rate})"
        )


def describe_protocol(p: Protocol) -> str:
    """'quick: 1 warm-up, 6 steps, 3 repeats, median'."""
    return f"{p.preset}: {p.warmup} warm-up, {p.steps} steps, {p.repeats} repeats, {p.statistic}"


def _age(seconds: float) -> str:
    s = abs(seconds)
    text = (
        f"{s:.0f} s"
        if s < 120
        else f"{s / 60:.0f} min"
        if s < 7200
        else f"{s / 3600:.1f} h"
        if s < 172800
        else f"{s / 86400:.1f} days"
    )
    return f"{text} {'older' if seconds >= 0 else 'newer'}"


def _run_of(points: Sequence[StoredPoint], result: PointResult) -> str | None:
    """The run a result was stored in, where it is among points (same spec and finishing time)."""
    return next(
        (p.run_id for p in points if p.result.finished == result.finished and p.result.spec == result.spec), None
    )


def scaling_marks(result: PointResult, base: StoredPoint, run_id: str | None, sc: Scaling) -> tuple[str, ...]:
    """Where a speedup's evidence is weak: a noisy baseline, one from another run or protocol, efficiency > 100%."""
    marks = []
    m = base.result.metrics
    if m is not None and m.noisy:
        marks.append(f"baseline noisy (CV {m.cv:.1%})")
    elif m is not None and len(m.repeat_throughputs) < 3:
        marks.append(f"baseline of n={len(m.repeat_throughputs)} repeat(s): its noise is unknown")
    age = result.started - base.result.finished
    if run_id is not None and base.run_id != run_id:
        marks.append(f"baseline from another run ({base.run_id}, {_age(age)})")
    elif run_id is None and abs(age) > 3600:
        marks.append(f"baseline measured {_age(age)}")
    if base.result.spec.protocol != result.spec.protocol:
        marks.append(
            f"baseline from another protocol ({describe_protocol(base.result.spec.protocol)} vs "
            f"{describe_protocol(result.spec.protocol)})"
        )
    if sc.efficiency > 1.0:
        marks.append(
            f"efficiency {sc.efficiency:.0%} is above 100%: a slow or noisy baseline, or more cache "
            "per device; not a speedup to trust"
        )
    return tuple(marks)


def _candidates(points: Sequence[StoredPoint], spec: PointSpec, identity: Mapping[str, str]) -> list[StoredPoint]:
    want = _match_key(spec)
    return [
        p
        for p in points
        if p.result.status == "ok"
        and p.result.metrics is not None
        and p.result.spec.world_size == 1
        and _match_key(p.result.spec) == want
        and all(p.result.env.identity.get(k) == v for k, v in identity.items())
    ]


def find_baseline(points: Sequence[StoredPoint], result: PointResult, run_id: str | None = None) -> StoredPoint | None:
    """The ok 1-device point of the same configuration whose identity keys match the result's: one of the same
    run first, then one of the same protocol, then the newest."""
    identity = {k: result.env.identity[k] for k in BASELINE_IDENTITY if k in result.env.identity}
    return max(
        _candidates(points, result.spec, identity),
        default=None,
        key=lambda p: (p.run_id == run_id, p.result.spec.protocol == result.spec.protocol, p.id),
    )


def outgrows_one_device(result: PointResult) -> bool:
    """A searched maximum of a configuration that splits the model across its devices (face's model parallel
    and Partial FC): one device must run out of memory there, so it has no 1-device baseline."""
    try:
        split = get_case(result.spec.model).configured(result.spec.params).splits_model
    except (UnknownCase, SpecError):
        return False
    return split and isinstance(result.extra.get("max_param"), dict)


def scaled(points: Sequence[StoredPoint], result: PointResult) -> Scaled | None:
    """Speedup and efficiency of an ok multi-device point against its baseline; None when either is missing."""
    if result.status != "ok" or result.metrics is None or result.spec.world_size == 1 or outgrows_one_device(result):
        return None
    run_id = _run_of(points, result)
    base = find_baseline(points, result, run_id)
    if base is None or base.result.metrics is None:
        return None
    sc = scaling(result.metrics.throughput, base.result.metrics.throughput, result.spec.world_size)
    return Scaled(sc, base, scaling_marks(result, base, run_id, sc))


def missing_baselines(
    points: Sequence[StoredPoint], specs: Sequence[PointSpec], host: Mapping[str, str]
) -> list[PointSpec]:
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
