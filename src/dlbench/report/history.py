"""The report's history chart: each configuration of the report's runs over every stored run, throughput with
its 95% CI against time, framework versions named where they change, regressions and improvements marked
(found by analysis/history.py with the test `dlbench compare` uses)."""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence

import matplotlib.dates as mdates
from matplotlib.axes import Axes

from dlbench.analysis.compare import ALPHA, MIN_EFFECT
from dlbench.analysis.history import REGRESSION, HistoryPoint, Series, build_series, series_key
from dlbench.report.chart_base import FAIL_COLOR, PALETTE, Chart, ChartSet, figure, styled, whiskers
from dlbench.report.groups import model_title
from dlbench.store.rows import StoredPoint

GOOD_COLOR = "#2f855a"
WARN_COLOR = "#b7791f"  # a point measured under contention


def _ok(s: Series) -> int:
    return sum(hp.point.result.status == "ok" and hp.point.result.metrics is not None for hp in s.points)


def verdict_caption(series: Sequence[Series], changes: Sequence[str]) -> str:
    """What the comparisons found, as `dlbench history` says it: the change points, the points measured under
    contention (no verdict), the comparisons whose samples could not have shown a change ('not enough samples',
    with the CLI's reason), and 'no significant change point' only where every comparison could have shown one."""
    blind = [
        f"{s.label} at run {hp.point.run_id}: {hp.comparison.note}"
        for s in series
        for hp in s.undetectable
        if hp.comparison is not None
    ]
    noisy = [f"{s.label} at run {hp.point.run_id}: {hp.contended}" for s in series for hp in s.points if hp.contended]
    out = ("Change points: " + "; ".join(changes) + ". ") if changes else ""
    if noisy:
        out += f"{len(noisy)} point(s) measured under contention (×), no verdict: " + "; ".join(noisy) + ". "
    if blind:
        out += (
            f"{len(blind)} comparison(s) could not have shown a change (not enough samples): " + "; ".join(blind) + "."
        )
    elif not changes and not noisy:
        out += "No significant change point."
    return out.strip()


def _change_mark(ax: Axes, x: float, y: float, hp: HistoryPoint, label: str) -> str | None:
    """A contended point's cross (no verdict from it); a change point's triangle (down: regression) with its
    change beside it, and the note that says it."""
    if hp.contended:  # no verdict from it: marked, never a triangle
        ax.plot([x], [y], marker="x", markersize=9, color=WARN_COLOR, linestyle="none", zorder=5)
    if not hp.change or hp.comparison is None or hp.comparison.change is None:
        return None
    bad = hp.change == REGRESSION
    colour = FAIL_COLOR if bad else GOOD_COLOR
    ax.plot([x], [y], marker="v" if bad else "^", markersize=10, color=colour, linestyle="none", zorder=5)
    ax.annotate(
        f"{hp.comparison.change:+.1%}",
        (x, y),
        textcoords="offset points",
        xytext=(8, -12),
        fontsize=7.5,
        fontweight="bold",
        color=colour,
    )
    return (
        f"{hp.change} of {hp.comparison.change:+.1%} in {label} at run {hp.point.run_id} "
        f"(p = {hp.comparison.p_value:.2g})"
    )


def _plot_series(ax: Axes, s: Series, colour: str) -> list[str]:
    """One configuration's throughput over time with its CIs, the framework version where it changes, and its
    marks (_change_mark); the notes of its changes."""
    ok = [hp for hp in s.points if hp.point.result.status == "ok" and hp.point.result.metrics is not None]
    xs = [float(mdates.date2num(datetime.datetime.fromtimestamp(hp.point.result.finished))) for hp in ok]
    ms = [hp.point.result.metrics for hp in ok]
    ys = [m.throughput for m in ms if m is not None]
    reach = [whiskers(m) for m in ms if m]  # no whisker below 3 repeats: no CI to draw
    err = [[lo for lo, _ in reach], [hi for _, hi in reach]]
    ax.errorbar(xs, ys, yerr=err, color=colour, marker="o", markersize=3.5, linewidth=1.4, capsize=2.5, label=s.label)
    notes = []
    previous = None
    for x, y, hp in zip(xs, ys, ok):
        version = hp.versions.get("framework_version", "")
        if version and version != previous:
            ax.annotate(
                version, (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7, color="#555"
            )
        previous = version
        note = _change_mark(ax, x, y, hp, s.label)
        if note:
            notes.append(note)
    return notes


@styled
def _model_chart(model: str, series: list[Series], effect: float = MIN_EFFECT) -> Chart:
    """One model's throughput over time: a line per configuration, its changes marked and said in the caption."""
    fig, ax = figure(7.2, 3.8)
    notes = [note for i, s in enumerate(series) for note in _plot_series(ax, s, PALETTE[i % len(PALETTE)])]
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)  # date ticks (minutes, hours or days apart)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
    ax.set_xlabel("when the point finished (local time)")
    ax.set_title(f"{model_title(model)}: throughput over time")
    with_ci = any(
        m is not None and m.ci_low is not None for m in (hp.point.result.metrics for s in series for hp in s.points)
    )
    ax.set_ylabel("samples/s (95% CI)" if with_ci else "samples/s (under 3 repeats: no CI)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=7)
    caption = (
        "Throughput of each configuration over every stored run; labels give the framework version "
        f"where it changes. Each point is compared with its segment's first point by the test of "
        f"`dlbench compare` (p < {ALPHA}, CI excluding 1, at least {effect:.0%}). "
    )
    caption += verdict_caption(series, notes)
    return Chart(f"history-{model}", f"{model}: throughput over time and versions", caption, fig)


def history_charts(points: Sequence[StoredPoint], pool: Sequence[StoredPoint]) -> ChartSet:
    """A history chart per model for the configurations of `points`, drawn from the whole `pool`; a note
    where no configuration was measured in two runs or more."""
    wanted = {series_key(p) for p in points}
    series = [s for s in build_series([p for p in pool if series_key(p) in wanted]) if _ok(s) >= 2]
    if not series:
        return ChartSet(
            notes=[
                "No history chart: no configuration of these runs has two or more ok points in "
                "the store (run it again, or pull the team's runs with `dlbench store pull`)."
            ]
        )
    by_model: dict[str, list[Series]] = defaultdict(list)
    for s in series:
        by_model[s.model].append(s)
    return ChartSet(charts=[_model_chart(m, ss[: len(PALETTE)]) for m, ss in sorted(by_model.items())])
