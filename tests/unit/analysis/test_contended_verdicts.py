"""Issue 42 item 2: no verdict from a point measured under contention. compare, history, rerun, reproduce --run
and the report's history chart say "contended: no verdict" (naming the contention) instead of faster/slower, and
the CI gates treat it as inconclusive: exit 6."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis.compare import CONTENDED, SLOWER, compare_points, compare_runs
from dlbench.analysis.history import REGRESSION, build_series
from dlbench.cli.reproduce import verdict_line
from dlbench.machine.telemetry import Contention, Telemetry, with_telemetry
from dlbench.records import PointResult
from dlbench.report.change_tables import comparison_table, contended_lines
from dlbench.store.rows import StoredPoint
from dlbench.store.store import Store
from tests.unit.analysis.test_compare import make_point
from tests.unit.analysis.test_history import DAY, T0, fake_point

CliResult = tuple[int, str, str]
BUSY = Telemetry(contention=Contention(others_share=0.86, cpus=2, load_avg=(7.1, 7.0, 6.0)))
QUIET = Telemetry(contention=Contention(others_share=0.03, cpus=2))


def busy(p: PointResult) -> PointResult:
    """The point, as measured while others held 86% of its 2 CPUs."""
    return with_telemetry(p, BUSY)


def test_a_contended_side_gets_no_verdict_even_for_a_clear_change() -> None:
    a, b = make_point(0.010, seed=1), make_point(0.015, seed=2)
    assert compare_points(a, b).verdict == SLOWER
    pc = compare_points(with_telemetry(a, QUIET), busy(b))
    assert pc.verdict == CONTENDED and pc.contended == "B"
    assert pc.note == "B: others used 86% of its 2 CPUs (load 7.10)"
    assert pc.ratio is not None and pc.ratio < 0.8  # the figures are kept, only the verdict is withheld
    both = compare_points(busy(a), busy(a))
    assert both.verdict == CONTENDED and both.contended == "A and B"


def test_compare_table_and_lines_name_the_contention() -> None:
    c = compare_runs(
        "a", [StoredPoint(1, "a", make_point(0.01, seed=1))], "b", [StoredPoint(2, "b", busy(make_point(0.01, seed=2)))]
    )
    assert [p.verdict for p in c.points] == [CONTENDED] and c.contended() == list(c.points)
    from rich.console import Console

    out = Console(width=120, record=True)
    out.print(comparison_table(c))
    text = out.export_text()
    assert f"{CONTENDED} (B contended)" in " ".join(text.split()) and "faster" not in text and "slower" not in text
    assert contended_lines(c) == [
        "fake resnet50 bs8 fp32 1n1c: no verdict, measured under contention: B: others used 86% of its 2 CPUs "
        "(load 7.10)"
    ]
    assert "neither side was measured under contention" in c.method


def _store(path: Path, *runs: list[PointResult]) -> list[str]:
    store = Store(path)
    ids = []
    for points in runs:
        rid = store.create_run("fixture")
        for p in points:
            store.add_point(rid, p)
        store.finish_run(rid, "done")
        ids.append(rid)
    store.close()
    return ids


def test_compare_exits_6_inconclusive_and_a_regression_still_wins(
    store_path: Path, cli: Callable[..., CliResult]
) -> None:
    a, b = _store(store_path, [make_point(0.01, seed=1)], [busy(make_point(0.01, seed=1))])
    code, out, err = cli("compare", a, b, "--store", str(store_path), "--fail-above", "5%")
    assert code == 6, err
    assert "inconclusive" in err and "exit 6" in err and "no verdict, measured under contention" in out
    code, out, _ = cli("compare", a, b, "--store", str(store_path), "--format", "json")
    assert code == 6 and json.loads(out)["points"][0]["verdict"] == CONTENDED
    slow = make_point(0.012, seed=2, batch=16)
    a2, b2 = _store(
        store_path.parent / "two.db",
        [make_point(0.01, seed=1), make_point(0.010, seed=1, batch=16)],
        [busy(make_point(0.01, seed=1)), slow],
    )
    code, _, err = cli("compare", a2, b2, "--store", str(store_path.parent / "two.db"), "--fail-above", "5%")
    assert code == 1 and "significant regression" in err


def _series(step_s: list[float], contended: set[int]) -> list[StoredPoint]:
    rng = np.random.default_rng(0)
    out = []
    for i, s in enumerate(step_s):
        p = fake_point(s, rng, T0 + i * DAY)
        out.append(StoredPoint(i + 1, f"run{i}", busy(p) if i in contended else p, f"uid-{i}"))
    return out


def test_history_calls_no_change_at_a_contended_point_and_never_starts_a_segment_there() -> None:
    # the first point is contended and much slower: it must not be the baseline the others are "improvements" on
    [s] = build_series(_series([0.02, 0.010, 0.010, 0.010 / 0.9, 0.010 / 0.9], contended={0, 3}))
    assert [hp.change for hp in s.points] == ["", "", "", "", REGRESSION]
    assert [bool(hp.contended) for hp in s.points] == [True, False, False, True, False]
    assert s.points[3].comparison is not None and s.points[3].comparison.verdict == CONTENDED
    assert s.points[1].comparison is None  # the first uncontended point opens the series


def test_history_cli_says_contended_and_exits_6_on_a_contended_newest_point(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "s.db"
    store = Store(db)
    for sp in _series([0.010] * 3 + [0.010 / 0.7], contended={3}):
        run = store.create_run("fixture")
        store.add_point(run, sp.result)
        store.finish_run(run, "done")
    code, out, err = cli("history", "-m", "resnet50", "--store", str(db), "--fail-on-regression")
    assert code == 6, err
    assert f"{CONTENDED} (others used 86%" in " ".join(out.split()) and "regression" not in out
    assert "1 point(s) measured under contention (no verdict)" in " ".join(out.split())
    assert "inconclusive" in err
    code, out, _ = cli("history", "-m", "resnet50", "--store", str(db), "--format", "json")
    [series] = json.loads(out)
    assert [bool(p["contended"]) for p in series["points"]] == [False, False, False, True]
    assert [p["change"] for p in series["points"]] == ["", "", "", ""]


def test_the_report_history_chart_marks_contended_points_instead_of_a_triangle(tmp_path: Path) -> None:
    from dlbench.report.document import build_report

    db = tmp_path / "s.db"
    store = Store(db)
    for sp in _series([0.010] * 3 + [0.010 / 0.7], contended={3}):
        run = store.create_run("fixture")
        store.add_point(run, sp.result)
        store.finish_run(run, "done")
    last = store.runs()[0]
    doc = build_report([last], store.points([last.id]), pool=store.points())
    [chart] = [c for c in doc.overall.charts if c.slug.startswith("history")]
    assert "measured under contention (×), no verdict" in chart.caption
    assert "improvement" not in chart.caption and "regression" not in chart.caption


def test_reproduce_names_the_original_and_the_point_measured_again() -> None:
    pc = compare_points(busy(make_point(0.01, seed=1)), make_point(0.01, seed=2))
    line = verdict_line(pc)
    assert line.startswith(f"verdict: {CONTENDED} (again / original = ")
    assert "original: others used 86% of its 2 CPUs" in line and "faster" not in line and "slower" not in line
