"""`dlbench reference convergence`'s table: the shipped reference convergence points (#44), one row each, under the
width rule of report/fit.py (numbers whole; the measuring hardware and versions left out first, and named); and
the command that measured each, wrapped to the console's width."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from dlbench.printable import printable
from dlbench.reference.rcp import Rcp
from dlbench.report.fit import Col, Fitted, fit

INDENT = "    "  # a command's continuation lines

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
        Col("by", squeeze=8, shared=True),
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
        "under the table, the command that measured each point (its file under reference/rcp/)",
    ]
    return fit(cols, rows, title="reference convergence points (shipped)", notes=notes, wide=wide)


@dataclass(frozen=True)
class Commands:
    """Each point's file and the command that measured it ('file: command'), wrapped at its spaces to the
    console's width, continuation lines indented (a word longer than a line is folded, never cut off)."""

    points: tuple[Rcp, ...]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """One block per point, every line within the console's width."""
        for p in self.points:
            text = printable(f"{p.file}: {p.measured.command}")
            for line in textwrap.wrap(text, options.max_width, subsequent_indent=INDENT, break_on_hyphens=False):
                yield Text(line, no_wrap=True, overflow="fold")
