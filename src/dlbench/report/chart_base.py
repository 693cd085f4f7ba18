"""What every report chart shares: the Chart record, the style, a colour per framework, SVG and PNG output.

Charts use matplotlib's object API (Figure, never pyplot's global state) on the Agg and SVG canvases.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dlbench.records import Metrics
from dlbench.report.groups import Column

matplotlib.use("Agg")

PALETTE = ("#3b6fb6", "#e07b39", "#3f9e5a", "#c8453c", "#8a6bbf", "#8c6d57", "#d67fbd", "#7f7f7f", "#b5a642", "#3fb0c8")
STYLE: dict[str, object] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e6ea",
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "axes.edgecolor": "#9aa3ad",
    "legend.frameon": False,
    "legend.fontsize": 8,
    "svg.fonttype": "none",
    "font.family": ["DejaVu Sans", "sans-serif"],
    "figure.dpi": 100,
    "xtick.color": "#444c56",
    "ytick.color": "#444c56",
}
FAIL_COLOR = "#c8453c"
P = ParamSpec("P")
R = TypeVar("R")


def styled(fn: Callable[P, R]) -> Callable[P, R]:
    """Draw under the report's matplotlib style without touching the global rcParams."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
            return fn(*args, **kwargs)

    return wrapper


@dataclass
class Chart:
    """A figure with the title and caption the report shows around it."""

    slug: str
    title: str
    caption: str
    figure: Figure


@dataclass
class ChartSet:
    """Charts, and notes for the charts that had nothing to draw."""

    charts: list[Chart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def extend(self, other: ChartSet) -> None:
        """Add another set's charts and notes."""
        self.charts += other.charts
        self.notes += other.notes


def colours(columns: Sequence[Column]) -> dict[Column, str]:
    """A fixed colour per series, in order of first appearance."""
    out: dict[Column, str] = {}
    for c in columns:
        out.setdefault(c, PALETTE[len(out) % len(PALETTE)])
    return out


def whiskers(m: Metrics) -> tuple[float, float]:
    """The CI's reach below and above the throughput; none (0, 0) with too few repeats for an interval."""
    if m.ci_low is None or m.ci_high is None:
        return 0.0, 0.0
    return max(m.throughput - m.ci_low, 0.0), max(m.ci_high - m.throughput, 0.0)


def figure(width: float = 6.4, height: float = 3.6) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


@dataclass(frozen=True)
class Slots:
    """n bars side by side in each group of a grouped bar chart (one per framework column; groups at x = 0, 1 ...)."""

    n: int

    @property
    def width(self) -> float:
        """One slot's width: the group shares 0.8 of its unit, a bar never wider than 0.3."""
        return min(0.8 / max(self.n, 1), 0.3)

    def x(self, group: int, slot: int) -> float:
        """The centre of bar `slot` in group `group`."""
        return group - self.width * self.n / 2 + self.width * (slot + 0.5)


def group_axis(ax: Axes, labels: Sequence[str], small: bool) -> None:
    """A grouped bar chart's x axis: a tick per group with its label (smaller where `small`: labels with lines
    below their head), half a slot of margin at each end, no vertical grid lines."""
    ax.set_xticks(range(len(labels)), labels, fontsize=7.5 if small else None)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.grid(axis="x", visible=False)


def fail_at_base(ax: Axes, text: str, x: float) -> None:
    """Why a bar is missing (a failed point's status, an MFU that cannot be given), written up from the base at x."""
    ax.annotate(
        text,
        (x, 0),
        textcoords="offset points",
        xytext=(0, 4),
        ha="center",
        rotation=90,
        fontsize=8,
        color=FAIL_COLOR,
        fontweight="bold",
    )


def legend_below(ax: Axes, n: int, handles: dict[str, object] | None = None) -> None:
    """A legend under the axes (up to 4 columns for n entries), so that it never hides a bar or its label."""
    args = (list(handles.values()), list(handles.keys())) if handles else ()
    ax.legend(*args, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=max(1, min(n, 4)))


def render_svg(chart: Chart) -> str:
    """The chart as an SVG element for inline use (no XML prolog), with ids unique to this chart."""
    buf = io.StringIO()
    # matplotlib types rc_context's keys as a Literal of every rcParam; STYLE's keys are plain str
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": chart.slug}):  # type: ignore[dict-item]
        chart.figure.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def render_png(chart: Chart, dpi: int = 120) -> bytes:
    """The chart as PNG bytes (Agg)."""
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        chart.figure.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()
