"""The report's charts, drawn with matplotlib's object API (Agg / SVG canvases, never pyplot's global state).

Each function returns `Chart`s (a titled figure) or, where the store holds nothing to draw, a note saying
why the chart is absent. Colours follow the framework across every chart of a report.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dlbench.report.groups import (
    Column,
    RowKey,
    Section,
    max_batch_of,
    model_title,
)
from dlbench.results.compare import step_matrix
from dlbench.results.store import StoredPoint

matplotlib.use("Agg")

PALETTE = ("#3b6fb6", "#e07b39", "#3f9e5a", "#c8453c", "#8a6bbf", "#8c6d57", "#d67fbd", "#7f7f7f",
           "#b5a642", "#3fb0c8")
STYLE: dict[str, object] = {
    "font.size": 9, "axes.titlesize": 10, "axes.titleweight": "bold", "axes.labelsize": 9,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e3e6ea",
    "grid.linewidth": 0.8, "axes.axisbelow": True, "axes.edgecolor": "#9aa3ad", "legend.frameon": False,
    "legend.fontsize": 8, "svg.fonttype": "none", "font.family": ["DejaVu Sans", "sans-serif"],
    "figure.dpi": 100, "xtick.color": "#444c56", "ytick.color": "#444c56",
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


def _figure(width: float = 6.4, height: float = 3.6) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def render_svg(chart: Chart) -> str:
    """The chart as an SVG element for inline use (no XML prolog), with ids unique to this chart."""
    buf = io.StringIO()
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": chart.slug}):  # type: ignore[arg-type,dict-item]
        chart.figure.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def render_png(chart: Chart, dpi: int = 120) -> bytes:
    """The chart as PNG bytes (Agg)."""
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        chart.figure.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()


def _si(v: float) -> str:
    return f"{v / 1000:,.1f}k" if v >= 10_000 else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 1 else f"{v:.2g}"


def _scale_axis(ax: Axes, devices: list[int], labels: dict[int, str]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices, [labels.get(d, str(d)) for d in devices])
    ax.minorticks_off()
    ax.set_xlim(devices[0] / 1.4, devices[-1] * 1.4)
    ax.set_xlabel("scale (nodes n, devices per node c)")


def _bars(sec: Section, cc: dict[Column, str]) -> Chart:
    """Throughput at one scale: batch groups on x, one bar per framework, CI whiskers, failures named."""
    fig, ax = _figure(6.4, 3.6)
    n = len(sec.columns)
    w = min(0.8 / max(n, 1), 0.3)
    top = 0.0
    for bi, bs in enumerate(sec.batches):
        row = next(r for r in sec.rows if r.batch_size == bs)
        for ci, col in enumerate(sec.columns):
            x = bi - w * n / 2 + w * (ci + 0.5)
            cell = sec.cell(row, col)
            if cell is None:
                continue
            m = cell.point.result.metrics
            if cell.ok and m is not None:
                err = [[max(m.throughput - m.ci_low, 0)], [max(m.ci_high - m.throughput, 0)]]
                ax.bar(x, m.throughput, w * 0.92, color=cc[col], yerr=err, ecolor="#333", capsize=3,
                       label=col.title if bi == 0 else None)
                ax.annotate(_si(m.throughput), (x, m.ci_high), textcoords="offset points", xytext=(0, 3),
                            ha="center", fontsize=7.5, color="#333")
                top = max(top, m.ci_high)
            else:
                ax.annotate(cell.status_text, (x, 0), textcoords="offset points", xytext=(0, 4), ha="center",
                            rotation=90, fontsize=8, color=FAIL_COLOR, fontweight="bold")
    ax.set_xticks(range(len(sec.batches)), [f"batch {b}" + (f" ({g})" if (g := _group(sec, b)) else "")
                                            for b in sec.batches])
    ax.set_xlim(-0.6, len(sec.batches) - 0.4)
    ax.set_ylim(0, (top or 1) * 1.18)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("samples/s (higher is better)")
    ax.set_title(f"Throughput, {sec.rows[0].scale}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", ncols=min(n, 4))
    return Chart(f"{sec.slug}-throughput", f"Throughput by framework, {sec.rows[0].scale}",
                 "Bars: throughput; whiskers: 95% CI over repeats. Failed points are named at the base.", fig)


def _group(sec: Section, bs: int) -> str:
    return "+".join(sorted({sec.group_label(r) for r in sec.rows if r.batch_size == bs and sec.group_label(r)}))


def _scale_lines(sec: Section, cc: dict[Column, str], bs: int, speedup: bool) -> Chart | None:
    rows = [r for r in sec.rows if r.batch_size == bs]
    devices = sorted({r.devices for r in rows})
    if len(devices) < 2:
        return None
    labels = {r.devices: r.scale for r in rows}
    fig, ax = _figure()
    drawn = False
    for col in sec.columns:
        xs, ys, lo, hi = [], [], [], []
        for r in sorted(rows, key=lambda r: r.devices):
            cell = sec.cell(r, col)
            m = cell.point.result.metrics if cell and cell.ok else None
            if m is None or (speedup and cell is not None and cell.scaling is None):
                continue
            xs.append(r.devices)
            if speedup and cell is not None and cell.scaling is not None:
                ys.append(cell.scaling.speedup)
                lo.append(0.0)
                hi.append(0.0)
            else:
                ys.append(m.throughput)
                lo.append(max(m.throughput - m.ci_low, 0))
                hi.append(max(m.ci_high - m.throughput, 0))
        if xs:
            drawn = True
            ax.errorbar(xs, ys, yerr=None if speedup else [lo, hi], color=cc[col], marker="o", ms=5, lw=2,
                        capsize=3, label=col.title)
    if speedup:
        ax.plot(devices, devices, ls="--", color="#8a929b", lw=1.2, label="ideal (linear)")
        ax.set_ylabel("speedup over 1 device")
        ax.set_yscale("log", base=2)
        ax.set_yticks(devices, [str(d) for d in devices])
        ax.minorticks_off()
    else:
        ax.set_ylabel("samples/s (higher is better)")
        ax.set_ylim(bottom=0)
    if not drawn:
        return None
    _scale_axis(ax, devices, labels)
    what = "Speedup" if speedup else "Throughput"
    ax.set_title(f"{what} vs scale, batch {bs} per device")
    ax.legend(loc="upper left")
    caption = ("Speedup = throughput / 1-device throughput of the same configuration; the dashed line is ideal."
               if speedup else "Points: throughput; whiskers: 95% CI over repeats.")
    return Chart(f"{sec.slug}-{'speedup' if speedup else 'scale'}-bs{bs}", f"{what} vs scale, batch {bs}",
                 caption, fig)


@styled
def throughput_charts(sec: Section, cc: dict[Column, str]) -> ChartSet:
    """Throughput vs scale per batch group (bars when only one scale was measured) and speedup vs ideal."""
    out = ChartSet()
    if len(sec.scales) < 2:
        if any(c.ok for c in sec.cells.values()) or sec.cells:
            out.charts.append(_bars(sec, cc))
        out.notes.append(f"{sec.title}: speedup needs more than one scale; only {sec.rows[0].scale} was measured.")
        return out
    for bs in sec.batches:
        for speedup in (False, True):
            chart = _scale_lines(sec, cc, bs, speedup)
            if chart is not None:
                out.charts.append(chart)
    return out


def _config_label(row: RowKey, col: Column, many_rows: bool) -> str:
    return f"{col.title} · {row.label}" if many_rows else col.title


@styled
def spread_chart(sec: Section, cc: dict[Column, str]) -> ChartSet:
    """Every measured step time per point: a box for the quartiles, dots for each step, so noise shows."""
    items: list[tuple[str, np.ndarray, str]] = []
    for row in sec.rows:
        for col in sec.columns:
            cell = sec.cell(row, col)
            if cell is None or not cell.ok:
                continue
            m = step_matrix(cell.point.result)
            if m.size:
                items.append((_config_label(row, col, len(sec.rows) > 1), m.ravel() * 1000, cc[col]))
    if not items:
        return ChartSet(notes=[f"{sec.title}: no raw step times to show."])
    fig, ax = _figure(6.4, max(2.2, 0.9 + 0.42 * len(items)))
    data = [v for _, v, _ in items]
    box = ax.boxplot(data, orientation="horizontal", widths=0.55, showfliers=False, patch_artist=True,
                     medianprops={"color": "#222", "lw": 1.5})
    for patch, (_, _, colour) in zip(box["boxes"], items):
        patch.set(facecolor=colour, alpha=0.25, edgecolor=colour)
    rng = np.random.default_rng(0)
    for i, (_, v, colour) in enumerate(items, start=1):
        ax.scatter(v, i + rng.uniform(-0.18, 0.18, v.size), s=9, color=colour, alpha=0.75, lw=0, zorder=3)
    ax.set_yticks(range(1, len(items) + 1), [lab for lab, _, _ in items])
    ax.invert_yaxis()
    lo, hi = min(float(v.min()) for v in data), max(float(v.max()) for v in data)
    if lo > 0 and hi / lo > 20:
        ax.set_xscale("log")
    ax.set_xlabel("step time, ms (each dot is one measured step, every repeat and rank)")
    ax.set_title("Spread of the raw step times")
    ax.grid(axis="y", visible=False)
    return ChartSet([Chart(f"{sec.slug}-spread", "Spread of the raw step times",
                           "Boxes: quartiles and median; dots: each measured step. A wide box is a noisy point.",
                           fig)])


@styled
def memory_chart(sec: Section, cc: dict[Column, str]) -> ChartSet:
    """Peak memory per device by batch group and framework, at the smallest scale measured."""
    devices = sec.scales[0]
    rows = [r for r in sec.rows if r.devices == devices]
    vals = {(r.batch_size, c): sec.cell(r, c) for r in rows for c in sec.columns}
    kinds = {cell.point.result.metrics.memory_kind for cell in vals.values()
             if cell and cell.ok and cell.point.result.metrics and cell.point.result.metrics.peak_memory_bytes}
    if not kinds:
        return ChartSet(notes=[f"{sec.title}: no peak memory was recorded."])
    fig, ax = _figure(6.4, 3.2)
    batches = sorted({r.batch_size for r in rows})
    n = len(sec.columns)
    w = min(0.8 / max(n, 1), 0.3)
    for ci, col in enumerate(sec.columns):
        for bi, bs in enumerate(batches):
            cell = vals.get((bs, col))
            m = cell.point.result.metrics if cell and cell.ok else None
            if m is None or m.peak_memory_bytes is None:
                continue
            x = bi - w * n / 2 + w * (ci + 0.5)
            gib = m.peak_memory_bytes / 2**30
            ax.bar(x, gib, w * 0.92, color=cc[col], label=col.title)
            ax.annotate(f"{gib:.2f}" if gib < 10 else f"{gib:.1f}", (x, gib), textcoords="offset points",
                        xytext=(0, 2), ha="center", fontsize=7.5, color="#333")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left")
    ax.set_xticks(range(len(batches)), [f"batch {b}" for b in batches])
    ax.set_xlim(-0.6, len(batches) - 0.4)
    ax.set_ylabel("GiB")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)
    ax.grid(axis="x", visible=False)
    kind = ", ".join(sorted(kinds)).replace("rss", "worker peak RSS").replace("cuda_max_allocated",
                                                                               "CUDA max allocated")
    ax.set_title(f"Peak memory per device ({kind})")
    return ChartSet([Chart(f"{sec.slug}-memory", "Peak memory", f"Peak memory per device at "
                           f"{rows[0].scale}: {kind}.", fig)])


@styled
def data_chart(sections: list[Section], cc: dict[Column, str]) -> ChartSet:
    """Synthetic vs real data, side by side, for every configuration measured both ways."""
    pairs: list[tuple[str, float, float, Column]] = []
    by_key = {(s.model, s.precision, s.device, s.input_size, s.data): s for s in sections}
    for (model, prec, dev, size, data), syn in by_key.items():
        real = by_key.get((model, prec, dev, size, "real"))
        if data != "synthetic" or real is None:
            continue
        for (row, col), cell in syn.cells.items():
            other = real.cell(row, col)
            ms = cell.point.result.metrics if cell.ok else None
            mr = other.point.result.metrics if other and other.ok else None
            if ms and mr:
                pairs.append((f"{model_title(model)} {prec}\n{col.title} · {row.label}", ms.throughput,
                              mr.throughput, col))
    if not pairs:
        return ChartSet(notes=[("Synthetic vs real data: no configuration was measured with both "
                                "(run the same points with --data real to see the input pipeline's cost).")])
    fig, ax = _figure(6.4, 3.6)
    x = np.arange(len(pairs))
    ax.bar(x - 0.2, [p[1] for p in pairs], 0.38, color="#3b6fb6", label="synthetic")
    ax.bar(x + 0.2, [p[2] for p in pairs], 0.38, color="#e07b39", label="real")
    for i, (_, s, r, _) in enumerate(pairs):
        ax.annotate(f"{r / s:.0%} of synthetic", (i + 0.2, r), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7.5)
    ax.set_xticks(x, [p[0] for p in pairs], fontsize=7.5, rotation=20 if len(pairs) > 3 else 0,
                  ha="right" if len(pairs) > 3 else "center")
    ax.set_ylabel("samples/s")
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper right")
    ax.set_title("Synthetic vs real data")
    return ChartSet([Chart("data-synthetic-vs-real", "Synthetic vs real data",
                           "The same configuration fed synthetic tensors and the real input pipeline.", fig)])


@styled
def max_batch_chart(points: list[StoredPoint], cc: dict[Column, str]) -> ChartSet:
    """The largest batch per device that fitted, per framework, model and precision (from the max search)."""
    best: dict[tuple[str, str, str, Column], int] = {}
    for p in points:
        mb = max_batch_of(p)
        if mb is None:
            continue
        s = p.result.spec
        k = (model_title(s.model), s.precision, s.device, Column(s.framework, s.compile, s.channels_last))
        best[k] = max(best.get(k, 0), mb)
    if not best:
        return ChartSet(notes=["Max batch size: no point in these runs came from a max batch search."])
    items = sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3].framework))
    fig, ax = _figure(6.4, max(2.0, 0.8 + 0.4 * len(items)))
    y = np.arange(len(items))
    ax.barh(y, [v for _, v in items], color=[cc.get(k[3], PALETTE[0]) for k, _ in items], height=0.6)
    for i, (_, v) in enumerate(items):
        ax.annotate(str(v), (v, i), textcoords="offset points", xytext=(3, 0), va="center", fontsize=8)
    ax.set_yticks(y, [f"{k[3].title} · {k[0]} · {k[1]} · {k[2]}" for k, _ in items])
    ax.invert_yaxis()
    ax.set_xlabel("largest batch per device that fitted")
    ax.set_xlim(right=max(v for _, v in items) * 1.15)
    ax.grid(axis="y", visible=False)
    ax.set_title("Max batch size")
    return ChartSet([Chart("max-batch", "Max batch size per framework",
                           "From the max batch search: the largest per-device batch that did not run out of memory.",
                           fig)])


__all__ = [
    "Chart",
    "ChartSet",
    "colours",
    "data_chart",
    "max_batch_chart",
    "memory_chart",
    "render_png",
    "render_svg",
    "spread_chart",
    "throughput_charts",
]
