"""Issue 24 in the report: every configuration visible (points that differ in a case parameter, threads or an
identity key get rows or columns of their own; only exact repeats share a cell, counted), and the smaller
items: a failed measured maximum demoted, one line for a section with nothing to draw, a titled history chart
with readable dates, synthetic/real ratios with their CI beside an uncovered legend, probes not counted as
failures, a report file readable like any other output. Stored fake points only: no training."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import matplotlib.dates as mdates
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from dlbench.records import PointResult
from dlbench.report.chart_base import colours
from dlbench.report.charts import throughput_charts
from dlbench.report.document import Report, build_report
from dlbench.report.files import temp_folder_beside, write_atomic
from dlbench.report.groups import build_sections
from dlbench.report.history import history_charts
from dlbench.report.html import render_html
from dlbench.report.largest_trainable import max_value_rows, verdict_lines
from dlbench.report.synthetic_vs_real import data_chart
from dlbench.store.store import RunRecord, StoredPoint
from tests.support.reports import make_point, one_repeat


def stored(points: list[PointResult], run: str = "run1", start: float = 1.7e9) -> list[StoredPoint]:
    """Points as a store gives them back: ids in order, one start time after another."""
    return [
        StoredPoint(i + 1, run, dataclasses.replace(p, started=start + 60 * i, finished=start + 60 * i + 30))
        for i, p in enumerate(points)
    ]


def params(r: PointResult, **values: int) -> PointResult:
    """The point with these case parameters."""
    return dataclasses.replace(r, spec=dataclasses.replace(r.spec, case_params=tuple(sorted(values.items()))))


def threads(r: PointResult, n: int) -> PointResult:
    """The point as run with --threads n (the spec's and the identity's)."""
    ident = {**r.env.identity, "threads": str(n)}
    return dataclasses.replace(
        r, spec=dataclasses.replace(r.spec, threads=n), env=dataclasses.replace(r.env, identity=ident)
    )


def max_facts(value: int) -> dict[str, object]:
    """What `run --param classes=max` keeps with the point it measured at the max."""
    return {
        "name": "classes",
        "unit": 1000,
        "max": value,
        "exact": True,
        "lo": 1000,
        "hi": 10**8,
        "fails_at": value + 1000,
        "probes": 17,
        "new_probes": 17,
        "note": "",
        "checks": [],
    }


def cells(points: list[StoredPoint]) -> dict[tuple[str, str], str]:
    """(row label, column title) -> the shown point's status or throughput, over every section."""
    out = {}
    for sec in build_sections(points):
        for (row, col), c in sec.cells.items():
            m = c.point.result.metrics
            out[(row.label, col.title)] = f"{m.throughput:.1f}" if c.ok and m else c.point.result.status
    return out


# -- item 1: every configuration visible -------------------------------------------------------------------


def test_wide_deep_vocabularies_each_get_a_row() -> None:
    pts = stored(
        [
            params(make_point("torch", model="wide_deep", batch=512, step_s=s), vocab=v)
            for v, s in ((3_200_000, 0.02), (4_000_000, 0.021), (6_400_000, 0.024))
        ]
    )
    shown = cells(pts)
    assert sorted(r for r, _ in shown) == [
        "bs 512 · 1n1c · vocab=3.2M",
        "bs 512 · 1n1c · vocab=4M",
        "bs 512 · 1n1c · vocab=6.4M",
    ]
    [sec] = build_sections(pts)
    assert all(c.hidden == 0 for c in sec.cells.values())


def test_face_modes_are_not_hidden_behind_an_oom_baseline() -> None:
    """The issue's face table: the 1-device baselines ran out of memory, the 1n2c maxima trained."""
    full = params(
        make_point("torch", model="face", batch=4, per_node=2, extra={"max_param": max_facts(45_000)}), classes=45_000
    )
    mp = params(
        make_point("torch", model="face", batch=4, per_node=2, step_s=0.011, extra={"max_param": max_facts(98_000)}),
        classes=98_000,
        model_parallel=1,
    )
    base = params(make_point("torch", model="face", batch=4, status="oom"), classes=98_000, model_parallel=1)
    shown = cells(stored([full, mp, base]))
    ok = {r: v for (r, _), v in shown.items() if v != "oom"}
    assert set(ok) == {
        "bs 4 · 1n2c (ddp) · classes=45K model_parallel=0",
        "bs 4 · 1n2c (ddp) · classes=98K model_parallel=1",
    }
    assert [r for (r, _), v in shown.items() if v == "oom"] == ["bs 4 · 1n1c · classes=98K model_parallel=1"]


def test_another_thread_count_is_another_row() -> None:
    one = threads(make_point("torch", per_node=2, step_s=0.01), 1)
    two = threads(make_point("torch", per_node=2, step_s=0.02, seed=5), 2)
    shown = cells(stored([one, two]))
    assert {r for r, _ in shown} == {"bs 8 · 1n2c (ddp) · threads=1", "bs 8 · 1n2c (ddp) · threads=2"}


def test_another_framework_version_is_another_column() -> None:
    old, new = make_point("torch"), make_point("torch", step_s=0.02)
    new = dataclasses.replace(
        new, env=dataclasses.replace(new.env, identity={**new.env.identity, "framework_version": "torch-2.0"})
    )
    tf = make_point("tf")
    shown = cells(stored([old, new, tf]))
    assert {c for _, c in shown} == {
        "PyTorch · framework_version=torch-1.0",
        "PyTorch · framework_version=torch-2.0",
        "TensorFlow/Keras",
    }
    assert {r for r, _ in shown} == {"bs 8 · 1n1c"}  # a version differs per framework: same row


def test_exact_repeats_show_the_newest_and_count_the_rest(report: tuple[Report, str]) -> None:
    pts = stored([make_point("torch", step_s=s, seed=i) for i, s in enumerate((0.01, 0.011, 0.012))])
    [sec] = build_sections(pts)
    [cell] = sec.cells.values()
    assert cell.point.id == 3 and cell.hidden == 2
    assert cell.repeats_text == "+2 earlier repeats of this configuration"
    assert "+2 earlier repeats of this configuration" in report[1]


def test_few_repeats_are_marked_in_the_report(report: tuple[Report, str]) -> None:
    """Item 2 in the report: an 'n=1' (or 'n=2') badge and no ± for a point with fewer than 3 repeats."""
    for n in (1, 2):
        assert f'badge few" title="fewer than 3 repeats: no CI, noise unknown">n={n}</span>' in report[1]


# -- item 9: the smaller items ------------------------------------------------------------------------------


def test_a_maximum_whose_measured_point_failed_is_demoted() -> None:
    good = params(
        make_point("torch", model="face", batch=4, per_node=2, extra={"max_param": max_facts(98_000)}),
        classes=98_000,
        model_parallel=1,
    )
    bad = params(
        make_point("torch", model="face", batch=4, per_node=2, status="oom", extra={"max_param": max_facts(174_000)}),
        classes=174_000,
        model_parallel=1,
        sample=10,
    )
    rows = {r.mode: r for r in max_value_rows(stored([good, bad]))}
    assert rows["model_parallel"].largest == "98K" and not rows["model_parallel"].demoted
    pfc = rows["partial_fc"]
    assert pfc.demoted and pfc.largest == "below 174K" and pfc.exact.startswith("no:")
    assert "oom when measured" in pfc.fails_at
    assert verdict_lines([good, bad]) == [
        "largest classes that trains, torch face bs4 1n2c: 98K, 99K ran out of memory; exact: within 1K, reproduced",
        (
            "largest classes that trains, torch face bs4 1n2c: below 174K; exact: no: 174K trained in the search, the "
            "point measured there ended oom"
        ),
    ]


def test_an_all_unsupported_section_is_one_line_not_a_chart() -> None:
    pts = stored([make_point(fw, model="bert_base", status="unsupported") for fw in ("mxnet", "jittor")])
    [sec] = build_sections(pts)
    out = throughput_charts(sec, colours(sec.columns))
    assert out.charts == []
    assert out.notes == [f"{sec.title}: no point measured a throughput (2 unsupported)."]


def test_the_bar_chart_names_a_failure_at_its_base_and_marks_a_bar_that_did_not_converge() -> None:
    from dlbench.report.convergence import NOT_CONVERGED_MARK

    pts = stored([make_point("torch"), make_point("jax", status="oom")])
    [sec] = build_sections(pts)
    [chart] = throughput_charts(sec, colours(sec.columns), {1: "diverged"}).charts
    ax = chart.figure.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert len(ax.patches) == 1 and any(t.endswith(f" {NOT_CONVERGED_MARK}") for t in texts)
    assert "oom" in " ".join(texts).lower() and "did not converge" in chart.caption
    assert ax.get_ylim()[1] >= 1.25 * ax.patches[0].get_height()  # room over the bar, its whisker and figure


def test_history_chart_has_a_title_and_date_ticks() -> None:
    pts = stored([make_point("torch", seed=i) for i in range(4)])  # a minute apart
    [chart] = history_charts(pts, pts).charts
    ax = chart.figure.axes[0]
    assert ax.get_title() == "ResNet-50 v1.5: throughput over time"
    assert isinstance(ax.xaxis.get_major_locator(), mdates.AutoDateLocator)
    FigureCanvasAgg(chart.figure).draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(":" in t for t in labels), labels  # hours and minutes, not bare numbers


def test_synthetic_vs_real_ratio_has_its_ci_and_the_legend_covers_nothing() -> None:
    syn = make_point("torch", step_s=0.010)
    real = make_point("torch", step_s=0.014, data="real", seed=3)
    sections = build_sections(stored([syn, real]))
    [chart] = data_chart(sections, colours([c for s in sections for c in s.columns])).charts
    ax = chart.figure.axes[0]
    [label] = [t for t in ax.texts if "of synthetic" in t.get_text()]
    assert "95% CI" in label.get_text()
    renderer = FigureCanvasAgg(chart.figure).get_renderer()
    chart.figure.draw(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(label.get_window_extent(renderer))
    assert not any(legend.overlaps(b.get_window_extent(renderer)) for b in ax.patches)


@pytest.fixture(scope="module")
def report() -> tuple[Report, str]:
    """One report (charts take seconds) of: three exact repeats, points of 1 and 2 repeats, a max batch search's
    probes (5, 2 of them out of memory) and the point measured at its max."""
    repeats = [make_point("torch", step_s=s, seed=i) for i, s in enumerate((0.01, 0.011, 0.012))]
    few = [one_repeat(make_point("tf", model="alexnet", batch=8 * n), n) for n in (1, 2)]
    measured = [make_point("torch", batch=64, extra={"max_batch": 64})]
    probes = [make_point("torch", batch=b, status="oom" if b > 64 else "ok") for b in (16, 32, 64, 128, 256)]
    pts = stored([*repeats, *few, *measured], "run") + [
        dataclasses.replace(p, id=p.id + 10) for p in stored(probes, "search")
    ]
    runs = [
        RunRecord("run", 0.0, "run", "dlbench run", "done", {}),
        RunRecord("search", 0.0, "maxbatch", "max batch search", "done", {}),
    ]
    doc = build_report(runs, pts)
    return doc, render_html(doc)


def test_probe_ooms_are_not_failures_in_the_header(report: tuple[Report, str]) -> None:
    doc, page = report
    assert doc.status_counts == {"ok": 6} and doc.probes == {"ok": 3, "oom": 2}
    assert '<span class="pill bad">' not in page and "5 max-search probes (2 out of memory" in page


def test_the_report_file_is_world_readable_like_other_output(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "r.html", "<p>x</p>")
        folder = temp_folder_beside(tmp_path / "r_files")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o644
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
