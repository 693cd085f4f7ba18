"""The report's charts: throughput and speedup vs scale, peak memory, step-time spread, synthetic vs real data,
max batch size. Each function returns `Chart`s or, where the store holds nothing to draw, a note saying why
the chart is absent. Colours follow the framework across every chart of a report.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from dlbench.report.chart_base import (
    FAIL_COLOR,
    PALETTE,
    Chart,
    ChartSet,
    figure,
    styled,
)
from dlbench.report.groups import Column, RowKey, Section, max_batch_of, model_title
from dlbench.results.compare import step_matrix
from dlbench.results.store import StoredPoint


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
    fig, ax = figure(6.4, 3.6)
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
        _legend_below(ax, n)
    return Chart(f"{sec.slug}-throughput", f"Throughput by framework, {sec.rows[0].scale}",
                 "Bars: throughput; whiskers: 95% CI over repeats. Failed points are named at the base.", fig)


def _legend_below(ax: Axes, n: int, handles: dict[str, object] | None = None) -> None:
    """A legend under the axes, so that it never hides a bar or its label."""
    args = (list(handles.values()), list(handles.keys())) if handles else ()
    ax.legend(*args, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=max(1, min(n, 4)))


def _group(sec: Section, bs: int) -> str:
    return "+".join(sorted({sec.group_label(r) for r in sec.rows if r.batch_size == bs and sec.group_label(r)}))


def _series(sec: Section, rows: list[RowKey], col: Column, speedup: bool) -> tuple[list[int], list[float],
                                                                                   list[list[float]]]:
    """x (devices), y (throughput or speedup) and CI whiskers of one framework's ok points."""
    xs: list[int] = []
    ys: list[float] = []
    err: list[list[float]] = [[], []]
    for r in sorted(rows, key=lambda r: r.devices):
        cell = sec.cell(r, col)
        m = cell.point.result.metrics if cell and cell.ok else None
        if cell is None or m is None:
            continue
        if speedup:
            value = 1.0 if r.devices == 1 else cell.scaling.speedup if cell.scaling else None
            if value is None:
                continue
            ys.append(value)
            err[0].append(0.0)
            err[1].append(0.0)
        else:
            ys.append(m.throughput)
            err[0].append(max(m.throughput - m.ci_low, 0.0))
            err[1].append(max(m.ci_high - m.throughput, 0.0))
        xs.append(r.devices)
    return xs, ys, err


def _scale_lines(sec: Section, cc: dict[Column, str], bs: int, speedup: bool) -> Chart | None:
    """Throughput (or speedup, with the ideal line) against the device count, one line per framework."""
    rows = [r for r in sec.rows if r.batch_size == bs]
    devices = sorted({r.devices for r in rows})
    if len(devices) < 2:
        return None
    fig, ax = figure()
    low, top = 1.0, float(devices[-1])
    for col in sec.columns:
        xs, ys, err = _series(sec, rows, col, speedup)
        if xs:
            low, top = min(low, *ys), max(top, *ys)
            ax.errorbar(xs, ys, yerr=None if speedup else err, color=cc[col], marker="o", ms=5, lw=2,
                        capsize=3, label=col.title)
    if not ax.lines:
        return None
    if speedup:
        ax.plot(devices, devices, ls="--", color="#8a929b", lw=1.2, label="ideal (linear)")
        ax.set_ylabel("speedup over 1 device")
        ax.set_yscale("log", base=2)
        ticks = [2.0**e for e in range(int(np.floor(np.log2(low))), int(np.ceil(np.log2(top))) + 1)]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    else:
        ax.set_ylabel("samples/s (higher is better)")
        ax.set_ylim(bottom=0)
    _scale_axis(ax, devices, {r.devices: r.scale for r in rows})
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
        scales = [r.devices for r in sec.rows if r.batch_size == bs]
        if len(scales) != len(set(scales)):  # several strategies at one scale: one line per framework would zigzag
            out.notes.append(f"{sec.title}, batch {bs}: several strategies at one scale; their lines are under "
                             "Gradient strategies.")
            continue
        for speedup in (False, True):
            chart = _scale_lines(sec, cc, bs, speedup)
            if chart is not None:
                out.charts.append(chart)
    return out


def _config_label(row: RowKey, col: Column, many_rows: bool) -> str:
    return f"{col.title} · {row.label}" if many_rows else col.title


@styled
def spread_chart(sec: Section, cc: dict[Column, str]) -> ChartSet:
    """Every measured step time relative to its point's median: a box for the quartiles, a dot per step."""
    items: list[tuple[str, np.ndarray, str]] = []
    for row in sec.rows:
        for col in sec.columns:
            cell = sec.cell(row, col)
            steps = step_matrix(cell.point.result).ravel() if cell is not None and cell.ok else np.empty(0)
            if steps.size:
                median = float(np.median(steps))
                label = f"{_config_label(row, col, len(sec.rows) > 1)}\nmedian {median * 1000:,.1f} ms"
                items.append((label, (steps / median - 1) * 100, cc[col]))
    if not items:
        return ChartSet(notes=[f"{sec.title}: no raw step times to show."])
    fig, ax = figure(6.4, max(2.4, 0.9 + 0.5 * len(items)))
    data = [v for _, v, _ in items]
    box = ax.boxplot(data, orientation="horizontal", widths=0.55, showfliers=False, patch_artist=True,
                     medianprops={"color": "#222", "lw": 1.5})
    for patch, (_, _, colour) in zip(box["boxes"], items):
        patch.set(facecolor=colour, alpha=0.25, edgecolor=colour)
    rng = np.random.default_rng(0)
    for i, (_, v, colour) in enumerate(items, start=1):
        ax.scatter(v, i + rng.uniform(-0.18, 0.18, v.size), s=10, color=colour, alpha=0.75, lw=0, zorder=3)
    ax.set_yticks(range(1, len(items) + 1), [lab for lab, _, _ in items], fontsize=7.5)
    ax.invert_yaxis()
    ax.axvline(0, color="#8a929b", lw=0.8)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:+.0f}%")
    ax.set_xlabel("step time vs the point's median (one dot per measured step)")
    ax.set_title("Spread of the raw step times")
    ax.grid(axis="y", visible=False)
    return ChartSet([Chart(f"{sec.slug}-spread", "Spread of the raw step times",
                           "Each point's step times relative to its median: boxes give the quartiles, dots every "
                           "step. A wide box or far dots mean a noisy measurement.", fig)])


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
    fig, ax = figure(6.4, 3.2)
    batches = sorted({r.batch_size for r in rows})
    n = len(sec.columns)
    w = min(0.8 / max(n, 1), 0.3)
    for ci, col in enumerate(sec.columns):
        for bi, bs in enumerate(batches):
            cell = vals.get((bs, col))
            m = cell.point.result.metrics if cell and cell.ok else None
            x = bi - w * n / 2 + w * (ci + 0.5)
            if cell is not None and not cell.ok:
                ax.annotate(cell.status_text, (x, 0), textcoords="offset points", xytext=(0, 4), ha="center",
                            rotation=90, fontsize=8, color=FAIL_COLOR, fontweight="bold")
            if m is None or m.peak_memory_bytes is None:
                continue
            gib = m.peak_memory_bytes / 2**30
            ax.bar(x, gib, w * 0.92, color=cc[col], label=col.title)
            ax.annotate(f"{gib:.2f}" if gib < 10 else f"{gib:.1f}", (x, gib), textcoords="offset points",
                        xytext=(0, 2), ha="center", fontsize=7.5, color="#333")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    _legend_below(ax, len(uniq), uniq)
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
    fig, ax = figure(6.4, 3.6)
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
    fig, ax = figure(6.4, max(2.0, 0.8 + 0.4 * len(items)))
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
