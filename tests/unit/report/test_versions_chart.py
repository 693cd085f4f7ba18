"""The report's versions chart (#49): a chart per configuration measured at two releases or more, throughput by
release with each release's change called as `compare --by version` calls it (contended: no verdict)."""

from __future__ import annotations

from dlbench.machine.telemetry import with_telemetry
from dlbench.report.document import build_report
from dlbench.report.versions import versions_charts
from dlbench.store.rows import StoredPoint
from tests.unit.analysis.test_versions import BUSY, at


def _stored(*points: object) -> list[StoredPoint]:
    return [StoredPoint(i, "r", p) for i, p in enumerate(points)]  # type: ignore[arg-type]


def test_a_chart_per_configuration_measured_at_two_releases() -> None:
    charts = versions_charts(_stored(at("1.0", 0.010, seed=1), at("2.0", 0.013, seed=2), at("2.1", 0.013, seed=3)))
    (chart,) = charts.charts
    assert chart.slug == "versions-fake-resnet50-bs8-fp32-1n1c"
    assert "1.0 -> 2.0: slower (-2" in chart.caption and "2.0 -> 2.1: no significant change" in chart.caption
    assert [t.get_text() for t in chart.figure.axes[0].get_xticklabels()] == ["1.0", "2.0", "2.1"]
    assert versions_charts(_stored(at("1.0", 0.01))).charts == []  # one release: nothing to chart


def test_a_contended_release_gets_no_verdict_in_the_caption() -> None:
    (chart,) = versions_charts(_stored(at("1.0", 0.010, seed=1), with_telemetry(at("2.0", 0.013, seed=2), BUSY))).charts
    assert "1.0 -> 2.0: contended: no verdict (-2" in chart.caption and "slower" not in chart.caption


def test_the_report_carries_the_versions_chart() -> None:
    report = build_report([], _stored(at("1.0", 0.010, seed=1), at("2.0", 0.013, seed=2)))
    assert any(c.slug.startswith("versions-") for c in report.overall.charts)
