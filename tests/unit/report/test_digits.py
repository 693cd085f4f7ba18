"""Issue 42 item 4: every throughput has at least two significant digits and its spread the same decimals, in the
terminal and the report alike (`bert_base 0.1 ± 0.0` in the terminal, `0.12 ± 0.01` in the report, before)."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from dlbench.analysis.compare import compare_runs
from dlbench.records import PointResult
from dlbench.report.change_tables import comparison_table
from dlbench.report.digits import fmt_rate, rate_decimals
from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.table import fmt_throughput, points_table
from dlbench.store.rows import StoredPoint
from tests.support.reports import make_point


@pytest.mark.parametrize(
    ("value", "spread", "text"),
    [
        (12345.6, 123.4, "12,346 ± 123"),
        (43.31, 2.14, "43.3 ± 2.1"),
        (2.2, 0.4, "2.20 ± 0.40"),
        (0.1234, 0.0125, "0.12 ± 0.01"),
        (0.05, 0.0049, "0.050 ± 0.005"),
        (0.0996, None, "0.100"),
        (0.0, None, "0.00"),
    ],
)
def test_two_significant_digits_and_the_spread_in_the_same_decimals(
    value: float, spread: float | None, text: str
) -> None:
    assert fmt_rate(value, spread) == text


def test_every_value_keeps_two_significant_digits() -> None:
    for exp in range(-6, 7):
        for mant in (1.0, 1.04, 2.5, 9.94):
            v = mant * 10.0**exp
            digits = fmt_rate(v).replace(",", "").replace(".", "").lstrip("0")
            assert len(digits) >= 2 and rate_decimals(v) >= 0, (v, fmt_rate(v))


def _slow(r: PointResult, throughput: float, half: float) -> PointResult:
    assert r.metrics is not None
    m = dataclasses.replace(r.metrics, throughput=throughput, ci_low=throughput - half, ci_high=throughput + half)
    return dataclasses.replace(r, metrics=m)


def test_terminal_and_report_write_a_slow_point_alike() -> None:
    p = _slow(make_point("torch", model="bert_base"), 0.1234, 0.0125)
    assert fmt_throughput(p) == "0.12 ± 0.01"
    out = Console(width=120, record=True)
    out.print(points_table([p], title="run x"))
    assert "0.12 ± 0.01" in out.export_text()
    page = render_html(build_report([], [StoredPoint(1, "r", p)]))
    assert '<span class="tp">0.12</span><span class="ci">± 0.01</span>' in page


def test_compare_writes_each_side_with_two_significant_digits() -> None:
    a = _slow(make_point("torch", model="bert_base"), 0.1234, 0.01)
    b = _slow(make_point("torch", model="bert_base", seed=1), 0.0872, 0.01)
    c = compare_runs("a", [StoredPoint(1, "a", a)], "b", [StoredPoint(2, "b", b)])
    out = Console(width=200, record=True)
    out.print(comparison_table(c))
    row = next(line for line in out.export_text().splitlines() if "bert_base" in line)
    assert " 0.12 " in row and " 0.087 " in row
