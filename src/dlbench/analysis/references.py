"""What a convergence point is judged against (#34, #44): the shipped reference convergence point of its key
(reference/rcp.py), or, where none matches (or `converge_reference` asks for it), reference runs measured here and
read from the store (torch fp32 on one device; the fake backend's points take a fake fp32 reference, for tests),
which are then checked against the shipped points of their own key where those exist: a local reference that
differs significantly from them is reported as suspect, never silently adopted. Measuring the missing runs is the
run API's (runapi/converge.py).

A local reference is at the candidate's model, batch size, input size, device and case parameters, over
REFERENCE_RUNS seeds from REFERENCE_SEED0 (the shipped points' seeds; a candidate's default seed is 0).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from dlbench.analysis.convergence import (
    CURVE_KEY,
    EVAL_KEY,
    REFERENCE_KEY,
    VERDICT_KEY,
    Floor,
    Reference,
    judge,
)
from dlbench.analysis.olympic import acceptance, ttest
from dlbench.analysis.targets import REFERENCE_RUNS, REFERENCE_SEED0
from dlbench.cases import get_case
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult
from dlbench.reference import rcp
from dlbench.spec import PointSpec
from dlbench.store.rows import StoredPoint

FRAMEWORK_VERSION_KEY = "framework_version"


def reference_specs(spec: PointSpec, seeds: int = REFERENCE_RUNS) -> list[PointSpec]:
    """The local reference runs a convergence point is judged against where no shipped point matches."""
    base = dataclasses.replace(
        spec,
        framework="fake" if spec.framework == "fake" else "torch",
        release=None,  # the candidate's framework release (jax==0.10.1, #49) is not the reference's
        precision="fp32",
        nodes=1,
        devices_per_node=1,
        strategy="none",
        compile=False,
        launcher="local",
        converge_reference="shipped",
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
    return [dataclasses.replace(base, seed=REFERENCE_SEED0 + s) for s in range(seeds)]


def key_of(spec: PointSpec, target_loss: float) -> rcp.RcpKey:
    """The key a point's reference convergence point is found by (its parameters at their defaults left out)."""
    case = get_case(spec.model)
    defaults = {p.name: p.default for p in case.params}
    params = tuple((k, v) for k, v in spec.case_params if defaults.get(k) != v)
    from dlbench.data.learnable import DATA_VERSION  # NumPy's module: imported where a key is made (start-up)

    return rcp.RcpKey(
        model=spec.model,
        params=params,
        input_size=spec.input_size,
        batch=spec.batch_size,
        precision_class=rcp.precision_class(spec.precision),
        data_version=DATA_VERSION,
        target_loss=round(target_loss, 6),
    )


def _same(a: rcp.RcpKey, b: rcp.RcpKey) -> bool:
    return a.model_copy(update={"target_loss": 0.0}) == b.model_copy(update={"target_loss": 0.0}) and (
        abs(a.target_loss - b.target_loss) < 1e-6
    )


def shipped_point(
    spec: PointSpec, target_loss: float, points: Sequence[rcp.Rcp] | None = None
) -> tuple[rcp.Rcp, str] | None:
    """The shipped point a candidate is judged against, with a note where it is of another precision class (a
    16-bit candidate without 16-bit points is judged against the fp32 ones); None when no point matches."""
    pool = rcp.shipped() if points is None else points
    key = key_of(spec, target_loss)
    for want in (key, key.model_copy(update={"precision_class": "fp32"})):
        found = next((p for p in pool if _same(p.key, want)), None)
        if found is not None:
            note = "" if want == key else f"no {key.precision_class} reference points: judged against the fp32 ones"
            return found, note
    return None


def _target_loss(spec: PointSpec) -> float | None:
    from dlbench.analysis.targets import target_for

    target = target_for(get_case(spec.model).configured(dict(spec.case_params)), None, spec.converge_target)
    return None if target is None else target.loss


def needs_local(spec: PointSpec, points: Sequence[rcp.Rcp] | None = None) -> bool:
    """Whether a convergence point needs reference runs measured here: asked for, or no shipped point matches."""
    if not spec.converge:
        return False
    if spec.converge_reference == "local":
        return True
    loss = _target_loss(spec)
    return loss is None or shipped_point(spec, loss, points) is None


def budget_floor(spec: PointSpec, points: Sequence[rcp.Rcp] | None = None) -> int | None:
    """The smallest step budget at which one run of a convergence point can still read `slower` against its shipped
    point: one reading past the t-test's upper edge for one run (fewer steps could only read `not reached`); None
    where no shipped point judges it."""
    if not spec.converge or spec.converge_reference == "local":
        return None
    loss = _target_loss(spec)
    found = shipped_point(spec, loss, points) if loss is not None else None
    if found is None or len(found[0].steps) < 2:
        return None
    point = found[0]
    upper = acceptance(point.steps, point.every, 1)[1]
    return (math.floor(upper / point.every) + 1) * point.every


def with_budget(spec: PointSpec, points: Sequence[rcp.Rcp] | None = None) -> PointSpec:
    """The point with its step budget raised to budget_floor where it asks (or its case gives) fewer steps."""
    floor = budget_floor(spec, points)
    if floor is None:
        return spec
    from dlbench.analysis.targets import target_for

    target = target_for(get_case(spec.model).configured(dict(spec.case_params)), spec.converge_steps)
    if target is None or target.budget >= floor:
        return spec
    return dataclasses.replace(spec, converge_steps=floor)


def budget_note(spec: PointSpec, asked: int | None) -> str | None:
    """One line where a point's step budget was raised above what was asked (with_budget), or None."""
    if not spec.converge or spec.converge_steps is None or (asked is not None and spec.converge_steps <= asked):
        return None
    if asked is None and spec.converge_steps is not None and budget_floor(spec) is None:
        return None
    was = f"{asked} steps" if asked is not None else "the case's budget"
    return (
        f"{spec.framework} {spec.model} bs{spec.batch_size}: --converge's budget raised from {was} to "
        f"{spec.converge_steps}: with fewer a run could never read `slower` than its reference point"
    )


def _curve(result: PointResult) -> tuple[Curve, float] | None:
    """The curve a point's worker left and its target loss: on an ok point, and on one stopped by Ctrl-C (its
    curve so far, or its whole curve where the throughput was being measured); None without one."""
    raw: Any = result.extra.get(CURVE_KEY)
    if not isinstance(raw, dict):
        return None
    return Curve.from_dict(raw), float(raw["target"]["loss"])


def floor_of(result: PointResult) -> Floor:
    """What the point's data allows (its target's best loss and target AUC), from the worker's curve facts."""
    raw: Any = result.extra.get(CURVE_KEY)
    target = raw.get("target", {}) if isinstance(raw, dict) else {}
    best, auc = target.get("best"), target.get("eval_auc")
    return Floor(float(best) if best is not None else None, float(auc) if auc is not None else None)


def stored_references(stored: Sequence[StoredPoint], spec: PointSpec) -> dict[int, PointResult]:
    """The newest stored local reference run per seed for this point (keyed by seed): one that ended ok, with a
    whole curve (a reference stopped by Ctrl-C is kept but measured again by the next run that needs it)."""
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


def missing_references(
    stored: Sequence[StoredPoint], specs: Sequence[PointSpec], points: Sequence[rcp.Rcp] | None = None
) -> list[PointSpec]:
    """The local reference runs the store lacks for these convergence points (each once): only for points that
    need a local reference (needs_local)."""
    out: dict[str, PointSpec] = {}
    for spec in specs:
        if not needs_local(spec, points):
            continue
        have = stored_references(stored, spec)
        for ref in reference_specs(spec):
            if ref.seed not in have:
                out.setdefault(ref.key(), ref)
    return list(out.values())


def from_shipped(point: rcp.Rcp, note: str = "") -> Reference:
    """A shipped point as the Reference a candidate is judged against."""
    m = point.measured
    label = f"{m.framework} {point.key.precision_class} 1 device"
    source = f"shipped {point.file}, {m.framework} {m.framework_version} on {m.hardware}, {m.date}"
    walls = tuple(r.wall_s for r in point.runs if r.steps is not None and r.wall_s is not None)
    seeds = tuple(r.seed for r in point.runs if r.steps is not None)
    notes = (note,) if note else ()
    return Reference(point.steps, point.every, seeds, label, walls, source, m.framework_version, notes)


def local_reference(stored: Sequence[StoredPoint], spec: PointSpec) -> Reference | None:
    """The reference made from the stored local runs that reached their target; None when none did."""
    steps, seeds, walls, every, version = [], [], [], 1, ""
    for seed, result in sorted(stored_references(stored, spec).items()):
        found = _curve(result)
        assert found is not None
        curve, target = found
        j = judge(curve, target, evaluation=_eval(result), floor=floor_of(result))
        every = curve.every
        version = framework_version(result) or version
        if j.steps_to_target is not None:
            steps.append(j.steps_to_target)
            seeds.append(seed)
            walls.append(j.wall_to_target_s or 0.0)
    if not steps:
        return None
    label = f"{reference_specs(spec)[0].framework} fp32 1 device"
    return Reference(tuple(steps), every, tuple(seeds), label, tuple(walls), "local", version)


def suspect(local: Reference, shipped: Reference) -> str | None:
    """Why a local reference differs from the shipped runs of its own key (a two-sided t-test at p = 0.05 each
    way), or None."""
    if len(local.steps) < 1 or len(shipped.steps) < 2:
        return None
    t = ttest(local.steps, shipped.steps, shipped.every)
    if t.call == "same":
        return None
    p = t.p_slower if t.call == "slower" else t.p_faster
    return (
        f"reference suspect: the local runs' {local.mean:.0f} steps are {t.call} than the shipped point's "
        f"{shipped.mean:.0f} (p = {p:.3g}); their environment may not train as the reference's did"
    )


def reference_for(
    stored: Sequence[StoredPoint], spec: PointSpec, points: Sequence[rcp.Rcp] | None = None
) -> Reference | None:
    """What a point is judged against: the shipped point of its key, unless it asks for a local reference or
    none matches; a local one says whether it was checked against the shipped point of its own key."""
    loss = _target_loss(spec)
    found = shipped_point(spec, loss, points) if loss is not None else None
    if found is not None and spec.converge_reference != "local":
        return from_shipped(*found)
    local = local_reference(stored, spec)
    if local is None:
        return None
    own = shipped_point(reference_specs(spec)[0], loss, points) if loss is not None else None
    if own is None:
        note = "no shipped point for this configuration: the local reference is unchecked"
        return dataclasses.replace(local, notes=(*local.notes, note))
    why = suspect(local, from_shipped(*own))
    note = why or f"checked against shipped {own[0].file}: consistent"
    return dataclasses.replace(local, notes=(*local.notes, note))


def _eval(result: PointResult) -> dict[str, Any] | None:
    raw: Any = result.extra.get(EVAL_KEY)
    return raw if isinstance(raw, dict) else None


def framework_version(result: PointResult) -> str:
    """The framework version a point ran under ('' where unknown)."""
    env = result.env
    return env.identity.get(FRAMEWORK_VERSION_KEY) or env.descriptive.get(FRAMEWORK_VERSION_KEY) or ""


def version_note(result: PointResult, reference: Reference) -> str | None:
    """That the candidate ran under another framework version than a shipped reference's, or None."""
    mine = framework_version(result)
    if (
        not reference.source.startswith("shipped")
        or not mine
        or not reference.framework_version
        or result.spec.framework != reference.label.split()[0]
    ):
        return None
    if mine == reference.framework_version:
        return None
    return (
        f"the reference was measured under {result.spec.framework} {reference.framework_version}, this point ran {mine}"
    )


def with_verdict(
    result: PointResult,
    stored: Sequence[StoredPoint],
    reference_run: bool = False,
    points: Sequence[rcp.Rcp] | None = None,
) -> PointResult:
    """The result with its judgement in extra[VERDICT_KEY] (a convergence point whose worker left a curve, ended ok
    or stopped by Ctrl-C: then its curve so far reads `interrupted`); a reference run is judged on its own
    (reached or not) and marked."""
    found = _curve(result)
    if found is None:
        return result
    curve, target = found
    reference = None if reference_run else reference_for(stored, result.spec, points)
    if reference is not None and (note := version_note(result, reference)):
        reference = dataclasses.replace(reference, notes=(*reference.notes, note))
    j = judge(curve, target, reference, _eval(result), floor_of(result)).to_dict()
    j["seed"] = result.spec.seed
    j["reference_line"] = reference.describe() if reference is not None else "none: judged on the target alone"
    extra = {**result.extra, VERDICT_KEY: j}
    if reference_run:
        extra[REFERENCE_KEY] = True
    return dataclasses.replace(result, extra=extra)
