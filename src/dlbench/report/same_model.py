"""The same-model check's table: a row per framework with its largest relative differences from torch (logits in
training and evaluation mode, loss, the step's change) and its verdict; notes name the tolerances, the worst
tensor of each failure and the deviations each framework's figures leave out."""

from __future__ import annotations

from dlbench.canonical.compare import TOLERANCES, Comparison, Figure
from dlbench.report.fit import Col, Fitted, fit
from dlbench.samemodel import Row, SameModelOutcome

COLUMNS = (
    Col("framework", "key"),
    Col("logits", "number", "right"),
    Col("eval", "number", "right"),
    Col("loss", "number", "right"),
    Col("step", "number", "right"),
    Col("verdict", "text", squeeze=8),
    Col("fp32 logits", "number", "right", optional=True),
)


def _fig(f: Figure | None) -> str:
    if f is None or f.value is None:
        return "-"
    return f"{f.value:.1e}" if f.value != float("inf") else "inf"


def _verdict(row: Row) -> str:
    if row.status == "reference":
        return "reference"
    if row.status == "inconclusive":
        return "no verdict"
    if row.comparison is not None:
        mark = "†" if row.comparison.covered else ""
        return ("pass" if row.status == "pass" else "FAIL") + mark
    return row.status


def _cells(row: Row) -> list[str]:
    c: Comparison | None = row.comparison
    if c is None:
        return [row.framework, "-", "-", "-", "-", _verdict(row), "-"]
    mark = "" if c.precision == "float64" else "*"  # judged in float32: the framework took no float64 run
    figures = [_fig(f) + (mark if f.value is not None else "") for f in (c.logits, c.eval_logits, c.loss, c.step)]
    return [row.framework, *figures, _verdict(row), _fig(c.float32_logits)]


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
        elif row.status in ("inconclusive", "skipped", "unsupported", "error"):
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
    t64, t32 = TOLERANCES["float64"], TOLERANCES["float32"]
    notes.append(
        "Largest relative difference from torch, judged in float64 (tolerances: logits max|a-b|/max|b|, in "
        "training and, eval, in evaluation mode "
        f"{t64.forward:g}, loss {t64.loss:g}, step the largest ||dw_a - dw_b|| / ||dw_b|| over the tensors "
        f"{t64.step:g}), or in float32 where marked * ({t32.forward:g}, {t32.loss:g}, {t32.step:g}); fp32 logits: "
        "the float32 model the benchmark runs, shown (a BatchNorm network's float32 forward can be chaotic)."
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
    rows = [_cells(row) for row in outcome.rows]
    return fit(COLUMNS, rows, title=title, notes=_notes(outcome), more="a wider terminal shows them")


__all__ = ["same_model_table"]
