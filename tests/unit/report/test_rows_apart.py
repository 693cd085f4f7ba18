"""Issue 42 item 3: every row of a table can be told from the others. `results` and `history` printed
`torch resnet50 2 fp32 1n1c` for runs with 1 and 2 threads, and for 64 px and 224 px inputs; now whatever
configuration field differs between rows (threads, input size, protocol, layout, device ...) is said on each row,
in the terminal at 60, 80 and 120 columns and in the report."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from dlbench.analysis.compare import compare_runs
from dlbench.analysis.history import build_series
from dlbench.analysis.variants import variant_labels
from dlbench.machine.telemetry import Telemetry, ThreadChoice, with_telemetry
from dlbench.records import Environment, PointResult
from dlbench.report.change_tables import comparison_table, history_table
from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.table import points_table
from dlbench.store.rows import StoredPoint
from tests.support.reports import CPU, make_point


def _threads(r: PointResult, n: int, auto: bool = False) -> PointResult:
    env = Environment({**r.env.identity, "threads": str(n)}, r.env.descriptive)
    r = dataclasses.replace(r, env=env, spec=dataclasses.replace(r.spec, threads=None if auto else n))
    return with_telemetry(r, Telemetry(threads=ThreadChoice("auto", n, 1, 2, 0.5, "why"))) if auto else r


def _spec(r: PointResult, **changes: object) -> PointResult:
    return dataclasses.replace(r, spec=dataclasses.replace(r.spec, **changes))  # type: ignore[arg-type]


def _rows() -> list[PointResult]:
    base = make_point("torch", batch=2)
    proto = dataclasses.replace(base.spec.protocol, steps=20)
    return [
        _threads(base, 1),
        _threads(base, 2),
        _threads(base, 1, auto=True),
        _spec(_threads(base, 1), input_size=64),
        _spec(_threads(base, 1), protocol=proto),
    ]


def _shown(width: int, table: object) -> str:
    out = Console(width=width, record=True)
    out.print(table)
    return out.export_text()


def test_every_differing_field_is_named() -> None:
    labels = variant_labels(_rows(), shown={"framework", "model", "batch_size", "precision"})
    assert labels == [
        "input_size=default steps=6 threads=1",
        "input_size=default steps=6 threads=2",
        "input_size=default steps=6 threads=auto(1)",
        "input_size=64 steps=6 threads=1",
        "input_size=default steps=20 threads=1",
    ]
    assert len(set(labels)) == len(labels)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_run_and_results_rows_read_apart_at_every_width(width: int) -> None:
    text = _shown(width, points_table(_rows(), title="run x"))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    words = text.split()
    for needed in ("threads=1", "threads=2", "threads=auto(1)", "input_size=64", "steps=20"):
        assert needed in words, (needed, text)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_history_and_compare_name_what_sets_their_rows_apart(width: int) -> None:
    rows = [StoredPoint(i + 1, f"run{i}", r, f"uid-{i}") for i, r in enumerate(_rows())]
    series = build_series(rows)
    assert len(series) == 5 and len({s.label for s in series}) == 5
    text = " ".join(_shown(width, history_table(series)).split())
    for needed in ("threads=2", "threads=auto(1)", "input_size=64", "steps=20"):
        assert needed in text, (needed, text)
    a = [StoredPoint(i, "a", r) for i, r in enumerate([_rows()[0], _rows()[3]])]
    c = compare_runs("a", a, "b", a)
    assert sorted(p.label for p in c.points) == [
        "torch resnet50 bs2 fp32 1n1c input_size=64",
        "torch resnet50 bs2 fp32 1n1c input_size=default",
    ]
    assert "input_size=64" in " ".join(_shown(width, comparison_table(c)).split())


def test_the_report_gives_each_configuration_a_row_of_its_own() -> None:
    cpu = {**CPU}
    base = make_point("torch", batch=2, identity=cpu)
    slow = _spec(base, protocol=dataclasses.replace(base.spec.protocol, steps=20))
    doc = build_report([], [StoredPoint(1, "r", base), StoredPoint(2, "r", slow)])
    [view] = doc.sections
    section = view.section
    assert len(section.rows) == 2 and {r.variant for r in section.rows} == {("steps=6",), ("steps=20",)}
    assert "steps=20" in render_html(doc)
