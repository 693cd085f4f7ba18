"""The convergence verdict beside the throughput (#34): a column in run/results and sweep tables where some point
has one, left out first where the terminal is narrow, its numbers whole at 80 columns."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from dlbench.analysis.convergence import VERDICT_KEY
from dlbench.records import PointResult
from dlbench.report.sweep import sweep_table
from dlbench.report.table import points_table
from tests.support.reports import make_point


def _render(results: list[PointResult], width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(points_table(results, title="run r1"))
    return out.getvalue()


def _with(verdict: str, faster: bool = False) -> PointResult:
    p = make_point("torch")
    return dataclasses.replace(p, extra={**p.extra, VERDICT_KEY: {"verdict": verdict, "faster": faster}})


def test_the_verdict_column_shows_where_some_point_has_one() -> None:
    text = _render([_with("not reached"), _with("converged", faster=True)], 120)
    assert "verdict" in text and "not reached" in text and "converged*" in text
    assert "verdict" not in _render([make_point("torch")], 120)


def test_at_80_columns_every_line_fits_and_the_throughput_stays_whole() -> None:
    results = [_with("not reached"), _with("diverged")]
    wide, narrow = _render(results, 200), _render(results, 80)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    numbers = {w for line in wide.splitlines()[3:] for w in line.split() if any(c.isdigit() for c in w)}
    assert numbers and all(n in narrow.split() for n in numbers)
    assert "not reached" in narrow and "diverged" in narrow


def _sweep(results: list[PointResult], width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(sweep_table(results, title="sweep s: run r1"))
    return out.getvalue()


def test_a_sweeps_table_has_the_verdict_column_where_its_points_have_verdicts() -> None:
    grouped = [
        dataclasses.replace(r, extra={**r.extra, "batch_group": g})
        for r, g in ((_with("converged"), "fixed"), (_with("slower"), "max"), (make_point("torch"), "min"))
    ]
    wide = _sweep(grouped, 200)
    head = next(line for line in wide.splitlines() if line.startswith("framework"))
    assert "verdict" in head and "group" in head
    rows = [line for line in wide.splitlines() if line.startswith("torch")]
    assert [line.split()[-2] for line in rows] == ["converged", "slower", "-"]  # beside the status, row by row
    assert "verdict" not in _sweep([make_point("torch")], 200)
    narrow = _sweep(grouped, 80)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    numbers = {w for line in rows for w in line.split() if any(c.isdigit() for c in w)}
    assert numbers and all(n in narrow.split() for n in numbers)
