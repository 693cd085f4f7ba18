"""The report's convergence section (#34) from fixture points (no training): per case a loss-curve chart against
the reference band and a time-to-target table beside the throughput; the mark on the throughput of every
configuration that did not converge (and on no other), said under its table; the table's numbers whole at 80
columns."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.analysis.convergence import CURVE_KEY, VERDICT_KEY
from dlbench.analysis.references import with_verdict
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult
from dlbench.report.convergence import NOT_CONVERGED_MARK, ConvergenceCase, configuration
from dlbench.report.document import Report, build_report
from dlbench.report.html import fmt_number, render_html
from dlbench.report.markdown import write_markdown
from dlbench.store.store import StoredPoint
from tests.support.reports import make_point
from tests.support.specs import flat_replace

TARGET = 0.25


def curve(factor: float, readings: int, nan_at: int | None = None, interrupted: bool = False) -> dict[str, object]:
    """A curve read every 10 steps, the loss 2.3 x factor^step, stopped at the target as a real run stops."""
    losses: list[float] = []
    for i in range(readings):
        losses.append(float("nan") if nan_at is not None and i >= nan_at else 2.3 * factor ** (10 * (i + 1)))
        if losses[-1] <= TARGET or losses[-1] != losses[-1]:
            break
    c = Curve(10, tuple(losses), tuple(0.05 * (i + 1) for i in range(len(losses))), 10 * len(losses), interrupted)
    return {**c.to_dict(), "target": {"loss": TARGET, "budget": 1000, "every": 10}}


def point(framework: str, precision: str, step_s: float, raw: dict[str, object], seed: int = 0) -> PointResult:
    p = make_point(framework, step_s=step_s, seed=seed)
    spec = dataclasses.replace(p.spec, precision=precision, seed=seed, converge=True)
    return dataclasses.replace(p, spec=spec, extra={**p.extra, CURVE_KEY: raw})


def stopped(raw: dict[str, object]) -> PointResult:
    """A point stopped by Ctrl-C while its curve trained: an error, no throughput, its curve so far."""
    p = make_point("torch", status="error", error="interrupted (Ctrl-C) during the convergence run")
    spec = dataclasses.replace(p.spec, precision="amp", converge=True)
    return dataclasses.replace(p, spec=spec, extra={CURVE_KEY: raw})


def fixture() -> list[StoredPoint]:
    """Three local reference runs (torch fp32, seeds 100-102) and candidates of each verdict, each throughput distinct."""
    refs = [
        StoredPoint(
            s + 1, "r1", with_verdict(point("torch", "fp32", 0.010 + s / 1000, curve(f, 100), 100 + s), (), True)
        )
        for s, f in enumerate((0.99, 0.989, 0.991))
    ]
    candidates = [
        point("torch", "bf16", 0.006, curve(0.99, 100)),  # converged, within the band
        point("tf", "fp32", 0.004, curve(0.999, 20)),  # not reached
        point("tf", "bf16", 0.003, curve(0.99, 100, nan_at=5)),  # diverged
        point("mxnet", "fp32", 0.005, curve(0.95, 100)),  # converged*, faster than the band
        point("mxnet", "bf16", 0.007, curve(0.995, 100)),  # slower
        stopped(curve(0.99, 8, interrupted=True)),  # interrupted
    ]
    return refs + [StoredPoint(10 + i, "r1", with_verdict(c, refs)) for i, c in enumerate(candidates)]


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report([], fixture())


@pytest.fixture(scope="module")
def markdown(report: Report, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Path]]:
    files = write_markdown(report, tmp_path_factory.mktemp("conv") / "r.md")
    return files[0].read_text(encoding="utf-8"), files


def _case(report: Report) -> ConvergenceCase:
    assert len(report.convergence) == 1  # every point shares one reference: one case
    return report.convergence[0]


def test_the_time_to_target_table_holds_each_verdict_steps_and_throughput(report: Report) -> None:
    case = _case(report)
    assert "ResNet-50" in case.title and "batch 8" in case.title and "target loss 0.25" in case.title
    rows = {r.configuration: r for r in case.rows}
    assert {k: r.verdict for k, r in rows.items()} == {
        "mxnet bf16 seed 0": "slower",
        "mxnet fp32 seed 0": "converged*",
        "tf bf16 seed 0": "diverged",
        "tf fp32 seed 0": "not reached",
        "torch amp seed 0": "interrupted",
        "torch bf16 seed 0": "converged",
        "torch fp32 seed 100 · reference": "converged",
        "torch fp32 seed 101 · reference": "converged",
        "torch fp32 seed 102 · reference": "converged",
    }
    converged = rows["torch bf16 seed 0"]
    raw = next(p.result for p in fixture() if p.id == converged.point_id).extra[VERDICT_KEY]
    assert isinstance(raw, dict) and converged.steps == str(raw["steps_to_target"]) == "230"
    assert converged.seconds == "1.2" and "±" in converged.throughput
    lo, hi = case.band or (0, 0)
    assert converged.reference_steps == f"230 [{lo:.0f}..{hi:.0f}]" and lo < 230 < hi
    assert rows["tf fp32 seed 0"].steps == rows["tf fp32 seed 0"].seconds == "-"
    assert rows["torch amp seed 0"].throughput == "error"  # stopped: no throughput, its verdict kept
    assert rows["torch fp32 seed 101 · reference"].reference_steps == "-"
    assert [r.reference_run for r in case.rows][-3:] == [True] * 3  # the reference runs last
    assert len(case.reference) == 3 and "3 run(s)" in case.reference_line


def test_the_section_has_a_chart_per_case_and_names_it(report: Report, markdown: tuple[str, list[Path]]) -> None:
    case = _case(report)
    assert [c.slug for c in report.convergence_charts.charts] == [case.slug]
    lines = [c for c in case.curves if not c.in_band]
    assert len(lines) == 6 and all(c.steps and len(c.steps) == len(c.losses) for c in lines)
    text, files = markdown
    png = next(f for f in files if f.name == f"{case.slug}.png")
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    assert "## Convergence" in text and f"({png.parent.name}/{png.name})" in text
    assert "| tf fp32 seed 0 | not reached | - | - |" in text
    assert "| torch bf16 seed 0 | converged | 230 | 1.2 |" in text
    page = render_html(report)
    assert 'id="convergence"' in page and "time-to-target" in page and f'id="{case.slug}"' in page
    assert "interrupted" in page and "converged*" in page


def _cells(text: str) -> list[str]:
    """Every cell of the Markdown throughput tables (rows of configurations)."""
    return [c for line in text.splitlines() if line.startswith("| batch") for c in line.split("|")[2:]]


def test_the_mark_is_on_every_throughput_that_did_not_converge_and_on_no_other(
    report: Report, markdown: tuple[str, list[Path]]
) -> None:
    points = fixture()
    verdicts = {p.id: p.result.extra[VERDICT_KEY]["verdict"] for p in points}  # type: ignore[index]
    marked = {i: v for view in report.sections for i, v in view.unconverged.items()}
    measured = {p.id for p in points if p.result.status == "ok"}
    assert marked == {i: verdicts[i] for i in measured if verdicts[i] != "converged"}
    assert set(marked.values()) == {"not reached", "diverged", "slower"}  # converged* is not marked
    text, _ = markdown
    cells = _cells(text)
    for p in points:
        if p.id not in measured:
            continue
        assert p.result.metrics is not None
        cell = next(c for c in cells if f"**{fmt_number(p.result.metrics.throughput)}**" in c)
        assert (NOT_CONVERGED_MARK in cell) == (p.id in marked), (p.result.spec, cell)
    notes = [line for line in text.splitlines() if line.startswith(f"- {NOT_CONVERGED_MARK} did not converge")]
    assert len(notes) == len([v for v in report.sections if v.unconverged]) >= 1
    for view in report.sections:  # the bars say it too, in the sections that have a mark
        caption = " ".join(c.caption for c in view.charts.charts if c.slug.endswith("-throughput"))
        assert (NOT_CONVERGED_MARK in caption) == bool(view.unconverged)


@pytest.mark.parametrize("width", (60, 80, 120))
def test_the_time_to_target_table_keeps_its_numbers_whole(report: Report, width: int) -> None:
    case = _case(report)
    out = io.StringIO()
    Console(file=out, width=width).print(case.table())
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
    words = set(text.split())
    for row in case.rows:
        for value in (row.verdict, row.steps, row.seconds, row.throughput, row.reference_steps):
            assert all(w in words for w in value.split()), (value, text)
        assert all(w in words for w in row.configuration.split())


def test_a_scale_line_rings_a_point_that_did_not_converge() -> None:
    from dlbench.report.chart_base import colours
    from dlbench.report.charts import throughput_charts
    from dlbench.report.groups import build_sections

    one = point("torch", "fp32", 0.010, curve(0.99, 100))
    two = dataclasses.replace(make_point("torch", per_node=2, step_s=0.012), extra={CURVE_KEY: curve(0.999, 20)})
    two = dataclasses.replace(two, spec=dataclasses.replace(two.spec, converge=True))
    points = [StoredPoint(1, "r", with_verdict(one, ())), StoredPoint(2, "r", with_verdict(two, ()))]
    (sec,) = build_sections(points)
    charts = throughput_charts(sec, colours(sec.columns), {2: "not reached"}).charts
    lines = [c for c in charts if "-scale-" in c.slug or "-speedup-" in c.slug]
    assert lines and all(
        f"{NOT_CONVERGED_MARK} did not converge: the verdict of its --converge run is 'not reached'" in c.caption
        for c in lines
    )
    for c in lines:  # the square drawn on the chart too, and the speedup chart's ideal line and log-2 axis
        labels = c.figure.axes[0].get_legend_handles_labels()[1]
        assert f"{NOT_CONVERGED_MARK} did not converge" in labels
        assert ("ideal (linear)" in labels) == ("-speedup-" in c.slug)
        assert c.figure.axes[0].get_yscale() == ("log" if "-speedup-" in c.slug else "linear")
    assert not any(NOT_CONVERGED_MARK in c.caption for c in throughput_charts(sec, colours(sec.columns)).charts)


def test_a_reference_run_stopped_by_ctrl_c_is_a_line_of_its_own_not_the_band() -> None:
    ref = point("torch", "fp32", 0.010, curve(0.99, 3, interrupted=True))
    ref = with_verdict(dataclasses.replace(ref, status="error", metrics=None, ranks=()), (), reference_run=True)
    (case,) = build_report([], [StoredPoint(1, "r", ref)]).convergence
    assert case.reference == [] and case.band is None and "no stored reference run" in case.reference_line
    assert [(c.label, c.verdict, c.in_band) for c in case.curves] == [
        ("torch fp32 seed 0 · reference", "interrupted", False)
    ]
    assert [r.verdict for r in case.rows] == ["interrupted"]


def test_points_of_one_scale_in_different_layouts_are_told_apart() -> None:
    """The convergence-cpu suite runs GPT at 2 ranks as data, tensor and pipeline parallel: three rows, three
    names (before, the tensor- and pipeline-parallel rows were both 'torch fp32 1n2c seed 0')."""
    base = point("torch", "fp32", 0.01, curve(0.99, 100))
    two = dataclasses.replace(base.spec, devices_per_node=2)
    specs = {
        "torch fp32 1n2c ddp seed 0": dataclasses.replace(two, strategy="ddp"),
        "torch fp32 1n2c TP2 seed 0": flat_replace(two, tensor_parallel=2),
        "torch fp32 1n2c PP2 M2 seed 0": flat_replace(two, pipeline_parallel=2, micro_batches=2),
        "torch fp32 1n2c FSDP seed 0": flat_replace(two, fsdp=True),
    }
    assert {configuration(dataclasses.replace(base, spec=s)) for s in specs.values()} == set(specs)
