"""Seed 004's view in the report (report/strategies.py): strategy studies, their lines and the verdict table,
from points built here with known step times (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.records import PointResult
from dlbench.report.groups import build_sections
from dlbench.report.strategies import strategy_report
from dlbench.store.store import Store, StoredPoint
from tests.support.reports import strategy_point as point
from tests.support.reports import study_points


def stored(results: list[PointResult]) -> list[StoredPoint]:
    return [StoredPoint(i + 1, "run1", r) for i, r in enumerate(results)]


def test_a_study_has_a_line_per_strategy_from_the_shared_one_device_point() -> None:
    report = strategy_report(build_sections(stored(study_points())))
    [study] = report.studies
    assert study.strategies == ["ps-cpu", "replicated-copy", "replicated-nccl"] and study.devices == [1, 2, 4]
    assert study.at("ps-cpu", 1) is study.baseline and study.at("replicated-copy", 1) is study.baseline
    two = study.at("ps-cpu", 2)
    assert (
        two is not None
        and two.speedup == pytest.approx(2.0, rel=0.05)
        and two.efficiency == pytest.approx(1.0, rel=0.05)
    )
    assert study.at("replicated-nccl", 4).status == "unsupported"  # type: ignore[union-attr]
    assert len(report.charts.charts) == 1 and "unsupported" in report.charts.charts[0].caption


def test_verdicts_name_the_fastest_its_margin_and_whether_it_is_beyond_the_noise() -> None:
    [two, four] = strategy_report(build_sections(stored(study_points()))).verdicts
    assert (two.devices, two.fastest, two.runner_up) == (2, "ps-cpu", "replicated-copy")
    assert two.margin == pytest.approx(0.14 / 0.10 - 1, rel=0.05) and two.noise == "yes"
    assert four.devices == 4 and four.margin is not None and four.margin < 0.02
    assert four.noise == "no: the 95% CIs overlap"


def test_two_repeats_are_not_enough_to_call_a_margin() -> None:
    [two, _] = strategy_report(build_sections(stored(study_points(repeats=2)))).verdicts
    assert two.fastest == "ps-cpu" and two.noise == "not enough repeats (n=2)"


def test_one_strategy_per_scale_is_no_study() -> None:
    pts = [point("none", 1, 0.1), point("ps-cpu", 2, 0.1), point("ps-cpu", 4, 0.2)]
    assert strategy_report(build_sections(stored(pts))).studies == []


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_the_report_shows_the_verdict_table_and_the_chart(tmp_path: Path, fmt: str) -> None:
    store = Store(tmp_path / "results.db")
    run = store.create_run("dlbench sweep alibaba-strategies-cpu (fixture)")
    for p in study_points():
        store.add_point(run, p)
    store.finish_run(run, "done")
    store.close()
    out = tmp_path / f"report.{fmt}"
    assert main(["report", "--store", str(tmp_path / "results.db"), "-o", str(out), "--format", fmt]) == 0
    text = out.read_text()
    assert "Gradient strategies" in text and "beyond the noise" in text and "mechanism of replicated-copy" in text
    assert "no: the 95% CIs overlap" in text and "strategies-resnet50" in text
