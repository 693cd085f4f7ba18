"""`run --dry-run`'s table: each planned point with its memory estimate per device, the limit here, whether it fits
and whether it would run; under it each point's estimate by part and each refusal, one line each."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.analysis.memory import gib
from dlbench.launch.fits import PlannedPoint
from dlbench.report.fit import Fitted
from dlbench.report.listing import run_plan_table
from dlbench.report.table import fmt_case_params


def plan_table(points: Sequence[PlannedPoint]) -> Fitted:
    """One row per planned point."""
    rows = []
    for i, p in enumerate(points, start=1):
        s = p.spec
        rows.append(
            (
                str(i),
                s.framework,
                s.model + fmt_case_params(list(s.case_params)),
                str(s.batch_size),
                s.precision,
                s.scale,
                s.strategy,
                gib(p.estimate.total) if p.estimate else "-",
                gib(p.limit.bytes) if p.limit else "-",
                p.fits,
                "no" if p.refusal else "yes",
            )
        )
    runs = sum(p.refusal is None for p in points)
    return run_plan_table(f"dry run: {len(points)} point(s), {runs} would run; nothing run", rows)


def plan_lines(points: Sequence[PlannedPoint]) -> list[str]:
    """Each point's estimate by part and the limit it was compared with, then each refusal; one line each."""
    lines = []
    for i, p in enumerate(points, start=1):
        if p.estimate is not None:
            limit = (
                f"; limit: {p.limit.what}"
                if p.limit
                else f"; no limit known here (ranks elsewhere, or no GPU seen): a device of at least "
                f"{gib(p.estimate.total)} holds it"
            )
            lines.append(f"{i}: estimated {p.estimate.describe()}{limit}")
        if p.refusal:
            lines.append(f"{i}: refused: {p.refusal}")
    return lines


__all__ = ["plan_lines", "plan_table"]
