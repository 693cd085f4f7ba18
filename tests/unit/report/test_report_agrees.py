"""The report says what the CLI says about the same store: GPT tokens/s, the history verdict (and its 'not enough
samples'), the spread axis' ticks, the special sections' wording, speedup marks and contended points."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib
import pytest
from matplotlib.figure import Figure

from dlbench.machine.telemetry import Contention, Telemetry, with_telemetry
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RepeatRaw
from dlbench.report.charts import signed_percent
from dlbench.report.digits import fmt_rate
from dlbench.report.document import build_report
from dlbench.report.gpt_layouts import layout_rows
from dlbench.report.history import history_charts
from dlbench.report.table import fmt_lm_rates
from dlbench.report.wide_deep_vocab import wide_deep_chart
from dlbench.store.store import Store, StoredPoint
from tests.support.reports import GPT_SMALL as SMALL
from tests.support.reports import gpt_point, make_point, one_repeat

matplotlib.use("Agg")
CliResult = tuple[int, str, str]


def test_gpt_tokens_per_s_come_from_the_point_s_sequence_as_in_the_run_table() -> None:
    p = gpt_point(1, SMALL, 1, 8, 0.5)
    short = dataclasses.replace(p.result, spec=dataclasses.replace(p.result.spec, input_size=16))  # seq 16 of 64
    [row] = layout_rows([StoredPoint(1, "run1", short)])
    cli = re.search(r"([\d,.]+) tokens/s", fmt_lm_rates(short))
    assert cli is not None and row.tokens_per_s is not None
    assert fmt_rate(row.tokens_per_s) == cli.group(1)
    assert row.tokens_per_s == pytest.approx(short.metrics.throughput * 16)  # type: ignore[union-attr]


def _two_steps(r: PointResult) -> PointResult:
    """The point with one repeat of its first two steps, metrics derived again."""
    spec = dataclasses.replace(r.spec, protocol=dataclasses.replace(r.spec.protocol, steps=2, repeats=1))
    ranks = tuple(
        dataclasses.replace(
            k, repeats=tuple(RepeatRaw(rep.step_times[:2], sum(rep.step_times[:2])) for rep in k.repeats)
        )
        for k in r.ranks
    )
    return dataclasses.replace(r, spec=spec, ranks=ranks, metrics=summarize(spec, ranks))


def _store(tmp_path: Path, points: list[PointResult]) -> Path:
    path = tmp_path / "s.db"
    s = Store(path)
    for p in points:
        rid = s.create_run("dlbench run")
        s.add_point(rid, p)
        s.finish_run(rid, "done")
    return path


def test_the_history_caption_says_not_enough_samples_where_the_cli_does(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    points = [_two_steps(one_repeat(make_point("torch", seed=i))) for i in range(2)]  # 2 samples a side: too few
    path = _store(tmp_path, points)
    code, _, err = cli("history", "--store", str(path))
    stored = Store(path, readonly=True).points()
    [chart] = history_charts(stored, stored).charts
    assert code == 3 and "could not have shown a change" in err
    assert "not enough samples" in chart.caption and "No significant change point" not in chart.caption
    assert "95% CI" not in chart.figure.axes[0].get_ylabel()  # n=1 points have no interval to label


def test_the_history_caption_with_samples_enough_says_no_change(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    path = _store(tmp_path, [make_point("torch", seed=1), make_point("torch", seed=1)])  # identical samples
    code, _, _ = cli("history", "--store", str(path))
    stored = Store(path, readonly=True).points()
    [chart] = history_charts(stored, stored).charts
    assert (code == 0) == ("No significant change point." in chart.caption)
    assert "95% CI" in chart.figure.axes[0].get_ylabel()


@pytest.mark.parametrize("half", [0.3, 0.04, 2.0, 30.0])
def test_spread_ticks_have_the_decimals_their_spacing_needs(half: float) -> None:
    ax = Figure().subplots()
    ax.set_xlim(-half, half)
    fmt = signed_percent(ax.xaxis)
    labels = [fmt(x, None) for x in ax.xaxis.get_majorticklocs()]
    assert len(set(labels)) == len(labels), labels  # every tick reads apart
    assert "-0%" not in labels and not any(re.fullmatch(r"-0(\.0+)?%", t) for t in labels), labels


def test_wide_deep_at_its_default_vocabulary_is_not_called_missing() -> None:
    p = StoredPoint(1, "run1", make_point("torch", model="wide_deep", batch=16))
    [note] = wide_deep_chart([p], {}).notes
    assert "default vocabulary" in note and "no wide_deep point" not in note


def test_report_header_counts_contended_points_apart() -> None:
    busy = Telemetry(contention=Contention(others_share=0.48, cpus=2, window_s=1.0, load_avg=(3.1, 2.0, 1.0)))
    points = [
        StoredPoint(1, "r1", make_point("torch")),
        StoredPoint(2, "r1", with_telemetry(make_point("torch", model="alexnet"), busy)),
    ]
    report = build_report([], points)
    assert report.status_counts == {"ok": 1, "ok, contended": 1}
