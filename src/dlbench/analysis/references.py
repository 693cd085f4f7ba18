"""The reference runs a convergence point is judged against (#34), read from the store: which they are (torch fp32 on
one device; the fake backend's points take a fake fp32 reference, for tests), which the store holds, the band they
make, and a point's verdict against it. Measuring the missing ones is the run API's (runapi/converge.py).

A reference is at the candidate's model, batch size, input size, device and case parameters, over seeds
0..REFERENCE_SEEDS-1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dlbench.analysis.convergence import CURVE_KEY, REFERENCE_KEY, VERDICT_KEY, Reference, judge
from dlbench.analysis.targets import REFERENCE_SEEDS
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.store.rows import StoredPoint


def reference_specs(spec: PointSpec, seeds: int = REFERENCE_SEEDS) -> list[PointSpec]:
    """The reference runs a convergence point is judged against."""
    base = dataclasses.replace(
        spec,
        framework="fake" if spec.framework == "fake" else "torch",
        precision="fp32",
        nodes=1,
        devices_per_node=1,
        strategy="none",
        compile=False,
        launcher="local",
        layout=dataclasses.replace(
            spec.layout,
            tensor_parallel=1,
            pipeline_parallel=1,
            micro_batches=1,
            fsdp=False,
            context_parallel=1,
            bucket_mb=None,
        ),
    )
    return [dataclasses.replace(base, seed=s) for s in range(seeds)]


def _curve(result: PointResult) -> tuple[Curve, float] | None:
    """The curve a point's worker left and its target loss: on an ok point, and on one stopped by Ctrl-C (its
    curve so far, or its whole curve where the throughput was being measured); None without one."""
    raw: Any = result.extra.get(CURVE_KEY)
    if not isinstance(raw, dict):
        return None
    return Curve.from_dict(raw), float(raw["target"]["loss"])


def stored_references(stored: Sequence[StoredPoint], spec: PointSpec) -> dict[int, PointResult]:
    """The newest stored reference run per seed for this point (keyed by seed): one that ended ok, with a whole
    curve (a reference stopped by Ctrl-C is kept but measured again by the next run that needs it)."""
    keys = {r.key(): r.seed for r in reference_specs(spec)}
    found: dict[int, PointResult] = {}
    for p in stored:
        if p.result.extra.get(REFERENCE_KEY) and p.result.spec.key() in keys and _whole(p.result):
            found[keys[p.result.spec.key()]] = p.result
    return found


def _whole(result: PointResult) -> bool:
    """An ok point with a curve that was not stopped by Ctrl-C."""
    found = _curve(result)
    return result.status == "ok" and found is not None and not found[0].interrupted


def missing_references(stored: Sequence[StoredPoint], specs: Sequence[PointSpec]) -> list[PointSpec]:
    """The reference runs the store lacks for these convergence points (each once)."""
    out: dict[str, PointSpec] = {}
    for spec in specs:
        if not spec.converge:
            continue
        have = stored_references(stored, spec)
        for ref in reference_specs(spec):
            if ref.seed not in have:
                out.setdefault(ref.key(), ref)
    return list(out.values())


def reference_for(stored: Sequence[StoredPoint], spec: PointSpec) -> Reference | None:
    """The band made from the stored reference runs that reached their target; None when none did."""
    steps, seeds, walls, every = [], [], [], 1
    for seed, result in sorted(stored_references(stored, spec).items()):
        found = _curve(result)
        assert found is not None
        curve, target = found
        j = judge(curve, target)
        every = curve.every
        if j.steps_to_target is not None:
            steps.append(j.steps_to_target)
            seeds.append(seed)
            walls.append(j.wall_to_target_s or 0.0)
    if not steps:
        return None
    label = f"{reference_specs(spec)[0].framework} fp32 1 device"
    return Reference(tuple(steps), every, tuple(seeds), label, tuple(walls))


def with_verdict(result: PointResult, stored: Sequence[StoredPoint], reference_run: bool = False) -> PointResult:
    """The result with its judgement in extra[VERDICT_KEY] (a convergence point whose worker left a curve, ended ok
    or stopped by Ctrl-C: then its curve so far reads `interrupted`); a reference run is judged on its own
    (reached or not) and marked."""
    found = _curve(result)
    if found is None:
        return result
    curve, target = found
    reference = None if reference_run else reference_for(stored, result.spec)
    j = judge(curve, target, reference).to_dict()
    j["seed"] = result.spec.seed
    j["reference_line"] = reference.describe() if reference is not None else "none: judged on the target alone"
    extra = {**result.extra, VERDICT_KEY: j}
    if reference_run:
        extra[REFERENCE_KEY] = True
    return dataclasses.replace(result, extra=extra)
