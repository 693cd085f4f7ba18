"""The tables of `dlbench history` and `dlbench compare` (and `rerun`), under the width rule of report/fit.py."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from rich.text import Text

from dlbench.analysis.compare import CONTENDED, FASTER, SLOWER, UNDETECTABLE, Comparison, PointComparison
from dlbench.analysis.history import REGRESSION, Series
from dlbench.report.digits import fmt_rate
from dlbench.report.fit import Cell, Col, Fitted, fit
from dlbench.report.table import fmt_throughput

_STYLE = {REGRESSION: "red", "improvement": "green", FASTER: "green", SLOWER: "red"}
HARDWARE_KEYS = ("device_model", "cpu_model", "device_count", "threads")
# Columns each command leaves out first where the terminal is narrow (its --help names them).
HISTORY_OPTIONAL = ("finished", "vs segment start", "p")  # the run id starts with its date and time
COMPARE_OPTIONAL = ("p", "MFU A → B")


def hardware_label(s: Series) -> str:
    """The hardware a series was measured on: 'cpu_model=AMD EPYC, threads=2'."""
    return ", ".join(f"{k}={v}" for k, v in sorted(s.hardware.items()) if k in HARDWARE_KEYS)


def history_table(series: Sequence[Series], wide: bool = False) -> Fitted:
    """Every configuration's points in one table: configuration, hardware, when, run (whole id), version,
    throughput, ratio to the segment's start with its CI, p, and the change found there (or why none could be)."""
    cols = [
        Col("configuration", "key", shared=True),
        Col("hardware", "key", shared=True, optional=True),
        Col("finished", "key", optional=True),
        Col("run", "key"),
        Col("framework version", "key", shared=True),
        Col("samples/s", "number", "right"),
        Col("vs segment start", "number", "right", optional=True),
        Col("p", "number", "right", optional=True),
        Col("change"),
    ]
    rows: list[list[Cell]] = []
    for s in series:
        for hp in s.points:
            r = hp.point.result
            when = datetime.datetime.fromtimestamp(r.finished).strftime("%Y-%m-%d %H:%M")
            tp = fmt_throughput(r) if r.metrics and r.status == "ok" else r.status  # 'n=1' where no CI can be had
            c = hp.comparison
            ratio = (
                f"{c.ratio:.3f} ({c.ci_low:.3f}-{c.ci_high:.3f})"
                if c and c.ratio is not None and c.ci_low is not None and c.ci_high is not None
                else "-"
            )
            pv = f"{c.p_value:.2g}" if c and c.p_value is not None else "-"
            change = Text("")
            if hp.change and c and c.change is not None:
                change = Text(f"{hp.change} ({c.change:+.1%})", style=_STYLE[hp.change])
            if hp.undetectable and c is not None:
                change = Text(c.note, style="yellow")
            if hp.contended:
                change = Text(f"{CONTENDED} ({hp.contended})", style="yellow")
            rows.append(
                [
                    s.label,
                    hardware_label(s),
                    when,
                    hp.point.run_id,
                    hp.versions.get("framework_version", "?"),
                    tp,
                    ratio,
                    pv,
                    change,
                ]
            )
    return fit(
        cols,
        rows,
        title="history",
        wide=wide,
        notes=["samples/s: ± half the 95% CI; 'n=1' where the point has too few repeats for one."],
    )


def fmt_mfu_change(p: PointComparison) -> str:
    """'41.0% → 40.2%'; 'above peak' or 'peak unknown' for a side without an MFU, '-' for one not measured."""

    def one(mfu: float | None, peak: str) -> str:
        if mfu is not None:
            return f"{mfu:.1%}"
        return (
            "above peak"
            if peak.endswith("; above peak")
            else "peak unknown"
            if peak.startswith("peak unknown")
            else "-"
        )

    return f"{one(p.mfu_a, p.peak_a)} → {one(p.mfu_b, p.peak_b)}"


def comparison_table(c: Comparison, wide: bool = False) -> Fitted:
    """One row per matching point: throughputs, ratio with its CI, p-value, MFU and verdict (the reason a point
    could not show a change follows the table: `undetectable_lines`)."""
    cols = [
        Col("configuration", "key"),
        Col("A samples/s", "number", "right"),
        Col("B samples/s", "number", "right"),
        Col("B/A", "number", "right"),
        Col("95% CI", "number", "right"),
        Col("p", "number", "right", optional=True),
        Col("MFU A → B", "number", "right", optional=True),
        Col("verdict"),
    ]
    rows: list[list[Cell]] = []
    for p in c.points:
        ta = fmt_rate(p.throughput_a) if p.throughput_a is not None else p.status_a
        tb = fmt_rate(p.throughput_b) if p.throughput_b is not None else p.status_b
        ratio = f"{p.ratio:.3f}" if p.ratio is not None else "-"
        ci = f"{p.ci_low:.3f}-{p.ci_high:.3f}" if p.ci_low is not None and p.ci_high is not None else "-"
        pv = f"{p.p_value:.2g}" if p.p_value is not None else "-"
        style = _STYLE.get(p.verdict, "yellow" if p.verdict in (UNDETECTABLE, CONTENDED) else "")
        text = p.verdict + (f" ({p.change:+.1%})" if p.verdict in _STYLE and p.change is not None else "")
        if p.verdict == UNDETECTABLE:
            text = p.note.split(" (have")[0]
        elif p.verdict == CONTENDED:
            text = f"{CONTENDED} ({p.contended} contended)"  # the lines under the table say how
        elif p.note:
            text += f" ({p.note})"
        rows.append([p.label, ta, tb, ratio, ci, pv, fmt_mfu_change(p), Text(text, style=style)])
    return fit(cols, rows, title=f"B = {c.run_b} vs A = {c.run_a}", wide=wide)


def undetectable_lines(c: Comparison) -> list[str]:
    """One line per point whose samples could not have shown the change asked about, with the reason."""
    return [f"{p.label}: {p.note}" for p in c.undetectable()]


def contended_lines(c: Comparison) -> list[str]:
    """One line per point given no verdict because a side was measured under contention, naming it."""
    return [f"{p.label}: no verdict, measured under contention: {p.note}" for p in c.contended()]
