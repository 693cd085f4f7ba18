"""The report's versions chart (#49): each configuration measured at two framework releases or more, its throughput
(95% CI) and MFU by release, oldest first, each release's change from the one before it called as `dlbench compare
--by version` calls it (analysis/versions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from dlbench.analysis.compare import CONTENDED, FASTER, SLOWER, UNDETECTABLE
from dlbench.analysis.mfu import efficiency
from dlbench.analysis.versions import Releases, by_release, compare_versions
from dlbench.report.chart_base import FAIL_COLOR, Chart, ChartSet, figure, styled, whiskers
from dlbench.store.rows import StoredPoint

GOOD_COLOR, LINE_COLOR, WARN_COLOR = "#2f855a", "#2b6cb0", "#b7791f"
MARKS = {SLOWER: ("v", FAIL_COLOR), FASTER: ("^", GOOD_COLOR), CONTENDED: ("x", WARN_COLOR)}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


@styled
def versions_chart(group: Releases) -> Chart:
    """One configuration's throughput and MFU by release, each release's change from the one before it marked."""
    releases = group.releases()
    results = [r for _, r in group.points]
    c = compare_versions(results)
    mfus = [efficiency(r).mfu for r in results]
    fig, ax = figure(7.2, 3.6)
    xs = list(range(len(releases)))
    ok = [(x, r.metrics) for x, r in zip(xs, results) if r.status == "ok" and r.metrics is not None]
    reach = [whiskers(m) for _, m in ok]
    ax.errorbar(
        [x for x, _ in ok],
        [m.throughput for _, m in ok],
        yerr=[[lo for lo, _ in reach], [hi for _, hi in reach]],
        color=LINE_COLOR,
        marker="o",
        markersize=4,
        capsize=3,
        label="samples/s",
    )
    for x, step in zip(xs[1:], c.points):
        mark = MARKS.get(step.verdict)
        if mark and step.throughput_b is not None:
            ax.plot([x], [step.throughput_b], marker=mark[0], markersize=10, color=mark[1], linestyle="none", zorder=5)
            if step.change is not None:
                ax.annotate(f"{step.change:+.1%}", (x, step.throughput_b), textcoords="offset points", xytext=(8, -12))
    ax.set_xticks(xs, releases)
    ax.set_xlabel(f"{results[0].spec.framework} release")
    with_ci = any(m.ci_low is not None for _, m in ok)
    ax.set_ylabel("samples/s (95% CI)" if with_ci else "samples/s (under 3 repeats: no CI)")
    ax.set_ylim(bottom=0)
    if any(m is not None for m in mfus):
        twin = ax.twinx()
        twin.plot(xs, [100 * m if m is not None else float("nan") for m in mfus], color="#718096", marker="s", ls="--")
        twin.set_ylabel("MFU % (dashed)")
        twin.set_ylim(bottom=0)
    ax.set_title(f"{group.label}: throughput by release")
    steps = "; ".join(
        f"{a} -> {b}: {p.verdict}"
        + (f" ({p.change:+.1%})" if p.change is not None and p.verdict in (FASTER, SLOWER, CONTENDED) else "")
        for (a, b), p in zip(pairwise(releases), c.points)
    )
    caption = (
        "The newest point of each release; each release compared with the one before it by the test of "
        f"`dlbench compare --by version`: {steps}. "
        + (" ".join(c.warnings) + " " if c.warnings else "")
        + (
            "MFU (dashed) on the right axis."
            if any(m is not None for m in mfus)
            else "No MFU: see the efficiency table."
        )
    )
    if any(p.verdict == UNDETECTABLE for p in c.points):
        caption += " 'not enough samples': these repeats could not have shown the minimum effect."
    return Chart(f"versions-{_slug(group.label)}", f"{group.label}: by framework release", caption.strip(), fig)


def versions_charts(points: Sequence[StoredPoint]) -> ChartSet:
    """A versions chart per configuration of the points measured at two releases or more; none (and no note) when
    no configuration was."""
    groups, _ = by_release(points)
    return ChartSet(charts=[versions_chart(g) for g in groups if len(g.points) >= 2])


__all__ = ["versions_chart", "versions_charts"]
