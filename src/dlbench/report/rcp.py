"""`dlbench reference convergence`'s table: the shipped reference convergence points (#44), one row each, under the
width rule of report/fit.py (numbers whole; the measuring hardware and versions left out first, and named)."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.reference.rcp import Rcp
from dlbench.report.fit import Col, Fitted, fit

RCP_OPTIONAL = ("hardware", "versions", "measured")


def rcp_table(points: Sequence[Rcp], wide: bool = False) -> Fitted:
    """Each point: case, configuration, target, runs, mean and spread of steps to target, who measured it."""
    cols = [
        Col("case", "key"),
        Col("configuration", "key"),
        Col("target", "number", "right"),
        Col("runs", "number", "right"),
        Col("steps", "number", "right"),
        Col("±", "number", "right"),
        Col("by", squeeze=8),
        Col("hardware", optional=True),
        Col("versions", optional=True),
        Col("measured", "number", optional=True),
    ]
    rows = []
    for p in points:
        k, m = p.key, p.measured
        params = " ".join(f"{n}={v}" for n, v in k.params)
        config = " ".join(x for x in (params, f"{k.input_size}px" if k.input_size else "", f"b{k.batch}") if x)
        target = f"{k.target_loss:g}" + (f", AUC {p.target_auc:g}" if p.target_auc is not None else "")
        rows.append(
            [
                k.model,
                f"{config} {k.precision_class} data v{k.data_version}",
                target,
                f"{len(p.steps)}/{len(p.runs)}",
                f"{p.mean:.0f}",
                f"{p.spread:.0f}",
                f"{m.framework} ({m.by})",
                m.hardware,
                f"{m.framework} {m.framework_version}, dlbench {m.dlbench_version.split(' ')[0]}",
                m.date,
            ]
        )
    notes = [
        "runs: reached the target / measured; steps: their mean steps to target, ± the sample standard deviation",
        "each point's command: dlbench reference convergence --format json (or the file under reference/rcp/)",
    ]
    return fit(cols, rows, title="reference convergence points (shipped)", notes=notes, wide=wide)
