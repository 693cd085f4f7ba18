"""The report's convergence section (#34): per case (model, batch, input size, device: the points that share one
reference), each configuration's time to target beside its throughput, and its loss curve against the reference
band (report/convergence_chart.py); and the mark the throughput tables and charts put on a configuration whose
convergence run did not converge.

A case's reference is the newest stored reference run per seed (analysis/references.py), from the whole store: the
runs that measured it need not be among the report's. Each row's reference steps are those its point was judged
against when it was stored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.analysis.convergence import CURVE_KEY, REFERENCE_KEY, VERDICT_KEY, Reference, verdict_of
from dlbench.analysis.references import reference_for, reference_specs, stored_references
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult
from dlbench.report.fit import Col, Fitted, fit
from dlbench.report.groups import model_title
from dlbench.report.table import fmt_case_params, fmt_scale, fmt_throughput
from dlbench.store.rows import StoredPoint

NOT_CONVERGED_MARK = "†"
TARGET_COLUMNS: tuple[Col, ...] = (
    Col("configuration", "key"),
    Col("verdict", "key"),
    Col("steps", "number", "right"),
    Col("seconds", "number", "right"),
    Col("samples/s", "number", "right"),
    Col("reference", "number", "right"),
)  # one-word headers: a number column's header does not wrap (report/fit.py)
TARGET_NOTES: tuple[str, ...] = (
    "steps, seconds: to the target, at the first reading at or below the target loss ('-': not reached); "
    "samples/s: the throughput measured after it; reference: the mean steps to target of the reference runs "
    "the point was judged against (their band in brackets); converged*: reached before the band, faster than "
    "the reference: suspect.",
)


def not_converged(result: PointResult) -> str | None:
    """The verdict of a measured point whose convergence run did not converge (slower, diverged, not reached,
    interrupted); None for a converged point (faster ones included) and a point without a verdict."""
    raw: Any = result.extra.get(VERDICT_KEY)
    if not isinstance(raw, dict) or raw.get("verdict") == "converged":
        return None
    return str(raw.get("verdict"))


def unconverged_of(result: PointResult) -> str:
    """The verdict a measured point's throughput is marked with ('' where it converged or was not judged)."""
    return (not_converged(result) or "") if result.status == "ok" and result.metrics else ""


def with_mark(text: str, verdict: str) -> str:
    """A throughput's text with the mark when its point did not converge."""
    return f"{text} {NOT_CONVERGED_MARK}" if verdict else text


def rows_note(rows: Iterable[Any]) -> str:
    """The mark's note under a table whose rows (or cells) carry `unconverged`; '' when none is marked."""
    verdicts = [v for row in rows if (v := getattr(row, "unconverged", ""))]
    return mark_note(verdicts) if verdicts else ""


def mark_note(verdicts: Iterable[str]) -> str:
    """What the mark on a throughput means, naming the verdicts it stands for here."""
    named = " or ".join(f"'{v}'" for v in sorted(set(verdicts)))
    return (
        f"{NOT_CONVERGED_MARK} did not converge: the verdict of its --converge run is {named}, not 'converged' "
        "(docs/convergence.md), so this throughput is of steps not shown to train as the reference does."
    )


@dataclass(frozen=True)
class TargetRow:
    """One convergence point as the time-to-target table shows it; cells ready to print ('-' where unknown)."""

    point_id: int
    configuration: str
    verdict: str
    steps: str
    seconds: str
    throughput: str
    reference_steps: str
    reference_run: bool

    @property
    def cells(self) -> tuple[str, ...]:
        """The cells in TARGET_COLUMNS order."""
        return (self.configuration, self.verdict, self.steps, self.seconds, self.throughput, self.reference_steps)


@dataclass(frozen=True)
class CaseCurve:
    """One convergence point's curve: the step at each reading and the loss read there; `in_band` for a whole
    reference run (the chart draws it in the reference's band, not as a line of its own)."""

    label: str
    steps: tuple[int, ...]
    losses: tuple[float, ...]
    verdict: str
    in_band: bool


@dataclass
class ConvergenceCase:
    """The convergence points sharing one reference: their rows, their curves and the reference's."""

    slug: str
    title: str
    target: float | None
    rows: list[TargetRow] = field(default_factory=list)
    curves: list[CaseCurve] = field(default_factory=list)
    reference: list[CaseCurve] = field(default_factory=list)  # the stored reference runs, one per seed
    band: tuple[float, float] | None = None  # the reference's steps-to-target band
    reference_line: str = "no stored reference run reached the target"

    def table(self, wide: bool = False) -> Fitted:
        """The time-to-target table under the width rule (report/fit.py): what the terminal prints."""
        return fit(TARGET_COLUMNS, [r.cells for r in self.rows], title=self.title, notes=TARGET_NOTES, wide=wide)


def _curve(result: PointResult) -> tuple[Curve, float | None] | None:
    raw: Any = result.extra.get(CURVE_KEY)
    if not isinstance(raw, dict):
        return None
    target: Any = raw.get("target")
    return Curve.from_dict(raw), float(target["loss"]) if isinstance(target, dict) and "loss" in target else None


def configuration(result: PointResult) -> str:
    """'torch bf16 +compile 1n2c ddp seed 1', 'torch fp32 1n2c TP2 seed 0' (beyond one device, the scale as the
    main tables write it, with the layout, and the experts' ranks), ' · reference' on a reference run."""
    s = result.spec
    parts = [s.framework, s.precision, *(("+compile",) if s.compile else ())]
    parts += [fmt_scale(s)] if s.world_size > 1 else []
    parts += [f"EP{s.layout.expert_parallel}"] if s.layout.expert_parallel > 1 else []
    parts += [s.strategy] if s.strategy != "none" else []
    return " ".join([*parts, f"seed {s.seed}"]) + (" · reference" if result.extra.get(REFERENCE_KEY) else "")


def _reference_steps(raw: dict[str, Any]) -> str:
    ref: Any = raw.get("reference")
    if not isinstance(ref, dict) or "mean" not in ref:  # judged on the target alone
        return "none"
    lo, hi = ref.get("band", (None, None))
    band = f" [{lo:.0f}..{hi:.0f}]" if lo is not None and hi is not None else ""
    return f"{float(ref['mean']):.0f}{band}"


def target_row(p: StoredPoint) -> TargetRow:
    """A convergence point's row: verdict, steps and seconds to target, throughput, the reference's steps."""
    r = p.result
    raw: Any = r.extra.get(VERDICT_KEY)
    raw = raw if isinstance(raw, dict) else {}
    steps, wall = raw.get("steps_to_target"), raw.get("wall_to_target_s")
    reference = bool(r.extra.get(REFERENCE_KEY))
    return TargetRow(
        point_id=p.id,
        configuration=configuration(r),
        verdict=verdict_of(r),
        steps=str(steps) if steps is not None else "-",
        seconds=f"{wall:,.1f}" if wall is not None else "-",
        throughput=fmt_throughput(r) if r.status == "ok" and r.metrics else r.status,
        reference_steps="-" if reference else _reference_steps(raw),
        reference_run=reference,
    )


def case_curve(result: PointResult, label: str) -> CaseCurve | None:
    """The steps and losses of a point's curve (None without one)."""
    found = _curve(result)
    if found is None:
        return None
    curve = found[0]
    steps = tuple(curve.read_steps(i) for i in range(len(curve.losses)))
    whole = result.status == "ok" and not curve.interrupted  # as analysis/references.py takes reference runs
    return CaseCurve(label, steps, curve.losses, verdict_of(result), bool(result.extra.get(REFERENCE_KEY)) and whole)


def _title(result: PointResult, target: float | None) -> str:
    s = result.spec
    size = f" · input {s.input_size}" if s.input_size else ""
    loss = f" · target loss {target:g}" if target is not None else ""
    return (
        f"{model_title(s.model)}{fmt_case_params(s.case_params)} · batch {s.batch_size}{size} · "
        f"{s.device.upper()}{loss}"
    )


def convergence_cases(
    points: Sequence[StoredPoint], pool: Sequence[StoredPoint] | None = None
) -> list[ConvergenceCase]:
    """The report's convergence points by case (those that share a reference), with the reference runs the store
    holds for each (from pool, the whole store, else the points)."""
    pool = points if pool is None else pool
    grouped: dict[str, list[StoredPoint]] = defaultdict(list)
    for p in sorted(points, key=lambda p: p.id):
        if _curve(p.result) is not None:
            grouped[reference_specs(p.result.spec)[0].key()].append(p)
    cases = []
    for i, pts in enumerate(grouped.values()):
        first = pts[0].result
        target = _curve(first)
        case = ConvergenceCase(f"convergence-{first.spec.model}-{i}", "", target[1] if target else None)
        case.title = _title(first, case.target)
        ordered = sorted(pts, key=lambda p: (bool(p.result.extra.get(REFERENCE_KEY)), configuration(p.result), p.id))
        case.rows = [target_row(p) for p in ordered]
        case.curves = [c for p in ordered if (c := case_curve(p.result, configuration(p.result))) is not None]
        refs = stored_references(pool, first.spec)
        case.reference = [c for s, r in sorted(refs.items()) if (c := case_curve(r, f"seed {s}")) is not None]
        band: Reference | None = reference_for(pool, first.spec)
        if band is not None:
            case.band, case.reference_line = band.band, band.describe()
        cases.append(case)
    return sorted(cases, key=lambda c: c.title)


def unconverged_points(points: Iterable[StoredPoint]) -> dict[int, str]:
    """Per point id, the verdict of each measured point that did not converge (what the mark stands for)."""
    return {p.id: v for p in points if (v := unconverged_of(p.result))}


__all__ = [
    "NOT_CONVERGED_MARK",
    "TARGET_COLUMNS",
    "CaseCurve",
    "ConvergenceCase",
    "TargetRow",
    "configuration",
    "convergence_cases",
    "mark_note",
    "not_converged",
    "rows_note",
    "target_row",
    "unconverged_of",
    "unconverged_points",
    "with_mark",
]
