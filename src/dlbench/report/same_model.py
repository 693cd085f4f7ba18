"""The same-model check's table: a row per framework with its largest relative differences from torch (logits in
training and evaluation mode, loss, the step's change) and its verdict; notes name the tolerances, the worst
tensor of each failure and the deviations each framework's figures leave out."""

from __future__ import annotations

from dlbench.canonical.compare import FORWARD_TOL, LOSS_TOL, STEP_TOL, Comparison, Figure
from dlbench.report.fit import Col, Fitted, fit
from dlbench.samemodel import Row, SameModelOutcome

COLUMNS = (
    Col("framework", "key"),
    Col("logits", "number", "right"),
    Col("eval logits", "number", "right"),
    Col("loss", "number", "right"),
    Col("step", "number", "right"),
    Col("verdict", "text", squeeze=8),
)


def _fig(f: Figure | None) -> str:
    if f is None or f.value is None:
        return "-"
    return f"{f.value:.1e}" if f.value != float("inf") else "inf"


def _verdict(row: Row) -> str:
    if row.status == "reference":
        return "reference"
    if row.comparison is not None:
        mark = "†" if row.comparison.covered else ""
        return ("pass" if row.status == "pass" else "FAIL") + mark
    return row.status


def _cells(row: Row) -> list[str]:
    c: Comparison | None = row.comparison
    if c is None:
        return [row.framework, "-", "-", "-", "-", _verdict(row)]
    step = _fig(c.step) + ("" if c.step_dtype == "float64" else " (fp32)")
    return [row.framework, _fig(c.logits), _fig(c.eval_logits), _fig(c.loss), step, _verdict(row)]


def _notes(outcome: SameModelOutcome) -> list[str]:
    notes = []
    deviations: dict[str, list[str]] = {}
    why: dict[str, str] = {}
    for row in outcome.rows:
        c = row.comparison
        if row.status == "fail" and c is not None:
            notes.append(f"{row.framework} fails: {c.failure()}")
        elif row.status == "pass" and row.note:
            notes.append(f"{row.framework}: {row.note}")
        elif row.status in ("skipped", "unsupported", "error"):
            notes.append(f"{row.framework} {row.status}: {row.note}")
        for cov in c.covered if c is not None else ():
            deviations.setdefault(cov.deviation.name, []).append(
                f"{row.framework} {cov.count} tensors, up to {cov.value:.1e} ({cov.worst})"
            )
            why[cov.deviation.name] = cov.deviation.why
    for name, parts in deviations.items():
        notes.append(
            f"† deviation {name}, not judged where the difference is the one it predicts: {'; '.join(parts)}. "
            f"{why[name]}."
        )
    steps = {r.comparison.step_dtype for r in outcome.rows if r.comparison is not None}
    notes.append(
        f"Max relative difference from torch: logits max|a-b|/max|b| (tolerance {FORWARD_TOL:g}, float32), loss "
        f"({LOSS_TOL:g}), step: the largest ||dw_a - dw_b|| / ||dw_b|| over the tensors ({STEP_TOL:g}), "
        + (
            "of the step taken in float64."
            if steps <= {"float64"}
            else "of the step taken in float64, or float32 where marked (fp32: a ReLU network's float32 step is "
            "chaotic at the element level)."
        )
    )
    return notes


def same_model_table(outcome: SameModelOutcome) -> Fitted:
    """The check's table under the width rule (numbers whole at 60 and 80 columns)."""
    r = outcome.request
    params = "".join(f" {k}={v}" for k, v in r.params)
    size = f" · input {outcome.input_size}" if outcome.input_size else ""
    title = (
        f"same model: {outcome.case.name}{params} · {outcome.tensors} tensors, {outcome.parameters:,} parameters · "
        f"batch {r.batch}{size} · seed {r.seed} · SGD lr {r.lr:g}"
    )
    return fit(COLUMNS, [_cells(row) for row in outcome.rows], title=title, notes=_notes(outcome))


__all__ = ["same_model_table"]
