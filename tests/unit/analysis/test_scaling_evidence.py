"""A speedup names its baseline's run, protocol and CV and is marked where that evidence is weak; the scale axis
labels each scale as itself (issue 24, item 5)."""

from __future__ import annotations

import dataclasses

import pytest

from dlbench.analysis.scaling import find_baseline, scaled
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.report.charts import _scale_lines
from dlbench.report.groups import build_sections
from dlbench.report.table import fmt_efficiency, fmt_speedup, scaling_notes
from dlbench.spec import PointSpec, Protocol
from dlbench.store.rows import StoredPoint

QUICK = Protocol(warmup=1, steps=4, repeats=3, statistic="median", preset="quick")
LONG = Protocol(warmup=5, steps=20, repeats=5, statistic="median", preset="standard")
ENV = Environment(
    {"framework": "torch", "framework_version": "2.0", "device": "cpu", "device_model": "cpu-x", "cpu_model": "cpu-x"},
    {"hostname": "h"},
)
T0 = 1_790_000_000.0


def point(
    step_s: float,
    nodes: int = 1,
    per_node: int = 1,
    protocol: Protocol = QUICK,
    when: float = T0,
    cv: float | None = None,
) -> PointResult:
    """A torch resnet50 bs2 point with constant step times (exact throughput), finished at `when`."""
    spec = PointSpec(
        framework="torch",
        model="resnet50",
        batch_size=2,
        protocol=protocol,
        nodes=nodes,
        devices_per_node=per_node,
        strategy="ddp" if nodes * per_node > 1 else "none",
        launcher="torchrun" if nodes * per_node > 1 else "local",
    )
    reps = tuple(RepeatRaw((step_s,) * protocol.steps, step_s * protocol.steps) for _ in range(protocol.repeats))
    ranks = tuple(RankRaw(r, reps) for r in range(nodes * per_node))
    m = summarize(spec, ranks)
    if cv is not None:
        m = dataclasses.replace(m, cv=cv, noisy=True)
    return PointResult(spec, "ok", ranks, m, ENV, started=when - 10, finished=when)


def test_the_issues_speedup_names_its_baseline_and_every_weakness() -> None:
    """`--scale 1n2c` printed 11.06x (efficiency 553%) against a baseline from another run, with another
    protocol and CV 38.5%, and said nothing about it."""
    base = StoredPoint(7, "old-run", point(1.0, protocol=LONG, cv=0.385, when=T0))
    two = point(2 / 11.06, per_node=2, when=T0 + 3 * 3600)  # twice the samples per step, 11.06x the rate
    pool = [base, StoredPoint(9, "new-run", two)]
    sc = scaled(pool, two)
    assert sc is not None and sc.scaling.speedup == pytest.approx(11.06)
    marks = " | ".join(sc.marks)
    assert "baseline noisy (CV 38.5%)" in marks
    assert "baseline from another run (old-run, 3.0 h older)" in marks
    assert "baseline from another protocol (standard: 5 warm-up, 20 steps, 5 repeats, median vs quick" in marks
    assert "above 100%" in marks and len(sc.marks) == 4
    [note] = scaling_notes([two], [sc])
    assert "against 1-device point #7 (run old-run, protocol standard: 5 warm-up" in note and "CV 38.5%" in note
    assert note.count("Marks:") == 1
    assert fmt_speedup(two, sc).endswith("(vs #7, 4 marks)") and fmt_efficiency(sc).endswith("(>100%)")


def test_a_same_run_same_protocol_baseline_is_preferred_and_unmarked() -> None:
    older_other_protocol = StoredPoint(1, "a", point(1.0, protocol=LONG, when=T0))
    same_run = StoredPoint(2, "b", point(1.0, when=T0 + 60))
    newer_other_run = StoredPoint(3, "c", point(1.0, when=T0 + 120))
    two = point(1.2, per_node=2, when=T0 + 90)
    pool = [older_other_protocol, same_run, newer_other_run, StoredPoint(4, "b", two)]
    assert find_baseline(pool, two, "b") is same_run
    sc = scaled(pool, two)
    assert sc is not None and sc.baseline is same_run and sc.marks == ()
    assert sc.scaling.efficiency == pytest.approx(1 / 1.2) and fmt_speedup(two, sc) == "1.67x (vs #2)"


def test_a_one_repeat_baseline_says_its_noise_is_unknown() -> None:
    one = Protocol(warmup=1, steps=4, repeats=1, statistic="median", preset="quick")
    base = StoredPoint(1, "r", point(1.0, protocol=one))
    two = point(1.2, per_node=2, protocol=one)
    sc = scaled([base, StoredPoint(2, "r", two)], two)
    assert sc is not None and sc.marks == ("baseline of n=1 repeat(s): its noise is unknown",)


def test_the_scale_axis_labels_1n2c_and_2n1c_each_as_itself() -> None:
    pts = [
        StoredPoint(1, "r", point(1.0)),
        StoredPoint(2, "r", point(0.6, per_node=2, when=T0 + 1)),
        StoredPoint(3, "r", point(0.7, nodes=2, when=T0 + 2)),
    ]
    [sec] = build_sections(pts)
    chart = _scale_lines(sec, dict.fromkeys(sec.columns, "#1f77b4"), (2, ()), speedup=True)  # batch 2, no variant
    assert chart is not None
    labels = [t.get_text() for t in chart.figure.axes[0].get_xticklabels()]
    assert labels == ["1n1c", "1n2c", "2n1c"]
    [series] = chart.figure.axes[0].containers  # the framework's errorbar line
    assert list(series[0].get_xdata()) == [0, 1, 2]  # one tick each, not both 2-device points on one


def test_the_report_cell_carries_the_marks() -> None:
    from dlbench.report.document import build_report
    from dlbench.report.html import render_html

    base = StoredPoint(1, "old", point(1.0, protocol=LONG, when=T0))
    two = StoredPoint(2, "new", point(0.3, per_node=2, when=T0 + 86400 * 3))
    page = render_html(build_report([], [two], pool=[base, two]))
    assert "baseline from another run (old, 3.0 days older)" in page and "above 100%" in page
