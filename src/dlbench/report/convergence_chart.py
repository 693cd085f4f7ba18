"""The loss-curve chart of a convergence case (#34): each configuration's curve against the reference band, i.e.
the reference runs' mean curve with their spread shaded, the target loss, and the band of steps to target a
configuration may take and read `converged`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dlbench.report.chart_base import PALETTE, Chart, ChartSet, figure, styled
from dlbench.report.convergence import CaseCurve, ConvergenceCase

REFERENCE_COLOR = "#5f6b7a"
BAND_COLOR = "#3f9e5a"
LINE_COLOURS = tuple(c for c in PALETTE if c not in ("#8c6d57", "#7f7f7f"))  # none that reads as the grey reference


def envelope(curves: Sequence[CaseCurve]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps, mean, min and max of the curves' finite readings at each step some curve was read at (a run stops
    at its target, so later steps hold fewer runs)."""
    at: dict[int, list[float]] = {}
    for c in curves:
        for step, loss in zip(c.steps, c.losses):
            if math.isfinite(loss):
                at.setdefault(step, []).append(loss)
    steps = sorted(at)
    return (
        steps,
        [sum(at[s]) / len(at[s]) for s in steps],
        [min(at[s]) for s in steps],
        [max(at[s]) for s in steps],
    )


@styled
def convergence_chart(case: ConvergenceCase) -> Chart:
    """One case's curves: a line per configuration (its verdict in the legend), the reference's mean and
    min..max shaded, the target dashed, the reference band of steps to target shaded green."""
    fig, ax = figure(6.4, 3.9)
    if case.reference:
        steps, mean, low, high = envelope(case.reference)
        n = len(case.reference)
        ax.fill_between(steps, low, high, color=REFERENCE_COLOR, alpha=0.25, lw=0, label=f"reference: min..max of {n}")
        ax.plot(steps, mean, color=REFERENCE_COLOR, lw=2.2, label="reference: mean")
    if case.band is not None:
        ax.axvspan(*case.band, color=BAND_COLOR, alpha=0.10, lw=0, label="reference band (steps to target)")
    if case.target is not None:
        ax.axhline(case.target, color="#8a929b", ls="--", lw=1.1, label=f"target loss {case.target:g}")
    shown = [c for c in case.curves if not c.in_band]  # a reference run stopped by Ctrl-C is a line of its own
    for i, c in enumerate(shown):
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        ys = [v if math.isfinite(v) else math.nan for v in c.losses]
        ax.plot(
            c.steps,
            ys,
            color=colour,
            lw=1.6,
            marker="o" if len(ys) < 3 else None,
            ms=3,
            label=f"{c.label}: {c.verdict}",
        )
        bad = next((s for s, v in zip(c.steps, c.losses) if not math.isfinite(v)), None)
        if bad is not None:  # a NaN reading: marked where it happened, at the last finite loss
            last = next((v for v in reversed(ys[: c.steps.index(bad)]) if math.isfinite(v)), case.target or 1.0)
            ax.plot([bad], [last], marker="x", ms=9, mew=2, color=colour, ls="none")
    finite = [v for c in [*shown, *case.reference] for v in c.losses if math.isfinite(v) and v > 0]
    if finite and max(finite) / min(finite) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over each reading's steps)")
    ax.set_xlim(left=0)
    ax.set_title(case.title, fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    caption = (
        "Lines: the loss read every K steps of each configuration's convergence run (its verdict in the legend; "
        "x: a reading that was not finite). Grey: the reference runs' mean loss, their min..max shaded (a run "
        "stops at the target, so later steps hold fewer runs). Green: the band of steps to target that reads "
        "converged."
    )
    return Chart(case.slug, f"Loss curves, {case.title}", caption, fig)


def convergence_charts(cases: Sequence[ConvergenceCase]) -> ChartSet:
    """One chart per case, in the cases' order."""
    return ChartSet([convergence_chart(c) for c in cases])


__all__ = ["convergence_chart", "convergence_charts", "envelope"]
