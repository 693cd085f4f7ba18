"""The report's charts: throughput and speedup vs scale, peak memory, step-time spread, synthetic vs real data,
max batch size. Each function returns `Chart`s or, where the store holds nothing to draw, a note saying why
the chart is absent. Colours follow the framework across every chart of a report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis

from dlbench.analysis.compare import step_matrix
from dlbench.report.chart_base import (
    FAIL_COLOR,
    PALETTE,
    Chart,
    ChartSet,
    Slots,
    fail_at_base,
    figure,
    group_axis,
    legend_below,
    styled,
    whiskers,
)
from dlbench.report.convergence import NOT_CONVERGED_MARK, mark_note
from dlbench.report.groups import Cell, Column, RowKey, Section, max_batch_of, model_title
from dlbench.store.store import StoredPoint


def _si(v: float) -> str:
    return f"{v / 1000:,.1f}k" if v >= 10_000 else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 1 else f"{v:.2g}"


ScaleKey = tuple[int, int, int, str]  # devices, nodes, devices per node, strategy: one tick of the scale axis


def _scale_key(r: RowKey) -> ScaleKey:
    return (r.devices, r.nodes, r.devices_per_node, r.strategy)


def _scale_axis(ax: Axes, scales: list[ScaleKey]) -> None:
    """One tick per measured scale, labelled with its own nodes and devices per node (1n2c and 2n1c both have 2
    devices: a tick per device count labelled them alike, the last one's name on both)."""
    shared = [(n, c) for _, n, c, _ in scales]  # a scale measured with several strategies names each
    labels = [f"{n}n{c}c" + (f"\n{st}" if shared.count((n, c)) > 1 else "") for _, n, c, st in scales]
    ax.set_xticks(range(len(scales)), labels)
    ax.minorticks_off()
    ax.set_xlim(-0.5, len(scales) - 0.5)
    ax.set_xlabel("scale (nodes n, devices per node c)")


def _bar(
    ax: Axes,
    x: float,
    w: float,
    cell: Cell,
    colour: str,
    label: str | None,
    unconverged: Mapping[int, str],
    marked: list[str],
) -> float:
    """One framework's bar of the throughput chart, its whiskers and figure over it (a failure named at the base
    instead); the verdict of a configuration that did not converge goes to `marked`. Returns the bar's top."""
    m = cell.point.result.metrics
    if not cell.ok or m is None:
        fail_at_base(ax, cell.status_text, x)
        return 0.0
    low, high = whiskers(m)
    ax.bar(x, m.throughput, w * 0.92, color=colour, yerr=[[low], [high]], ecolor="#333", capsize=3, label=label)
    few = "" if m.has_spread else f"\nn={m.repeats}"
    mark = f" {NOT_CONVERGED_MARK}" if cell.point.id in unconverged else ""
    if mark:
        marked.append(unconverged[cell.point.id])
    ax.annotate(
        _si(m.throughput) + mark + few,
        (x, m.throughput + high),
        textcoords="offset points",
        xytext=(0, 3),
        ha="center",
        fontsize=7.5,
        color="#333",
    )
    return float(m.throughput + high)


def _bars(sec: Section, cc: dict[Column, str], rows: list[RowKey], unconverged: Mapping[int, str]) -> Chart:
    """Throughput of configurations measured at one scale: a group per row (batch, and what sets it apart), one
    bar per framework, CI whiskers (none with fewer than 3 repeats: 'n=1' over the bar), failures named, and
    the mark of a configuration that did not converge after its figure."""
    marked: list[str] = []
    fig, ax = figure(6.4, 3.6)
    slots = Slots(len(sec.columns))
    top = 0.0
    scales = sorted({r.scale for r in rows})
    for bi, row in enumerate(rows):
        for ci, col in enumerate(sec.columns):
            cell = sec.cell(row, col)
            if cell is not None:
                label = col.title if bi == 0 else None
                top = max(top, _bar(ax, slots.x(bi, ci), slots.width, cell, cc[col], label, unconverged, marked))
    group_axis(ax, [_bar_label(sec, r, len(scales) > 1) for r in rows], any(r.variant for r in rows))
    ax.set_ylim(0, (top or 1) * 1.25)
    ax.set_ylabel("samples/s (higher is better)")
    where = scales[0] if len(scales) == 1 else " and ".join(scales)  # several scales: named, not 'one scale'

    ax.set_title(f"Throughput, {where}")
    if ax.get_legend_handles_labels()[0]:
        legend_below(ax, slots.n)
    return Chart(
        f"{sec.slug}-throughput",
        f"Throughput by framework, {where}",
        "Bars: throughput; whiskers: 95% CI over repeats (none below 3 repeats). Failed points are named at the base."
        + (f" {mark_note(marked)}" if marked else ""),
        fig,
    )


def _bar_label(sec: Section, row: RowKey, scale: bool = False) -> str:
    """'batch 8 (max)' (and its scale where bars of several scales stand side by side) and, on lines below,
    what sets the row apart."""
    group = sec.group_label(row)
    head = (
        f"batch {row.batch_size}"
        + (f" ({group})" if group else "")
        + (f" · {row.scale}" if scale else "")
        + (f" {row.strategy}" if row.strategy != "none" else "")
    )
    return "\n".join([head, *row.variant])


def _series(
    sec: Section, rows: list[RowKey], col: Column, speedup: bool, scales: list[ScaleKey]
) -> tuple[list[int], list[float], list[list[float]]]:
    """x (the scale's tick), y (throughput or speedup) and CI whiskers of one framework's ok points."""
    xs: list[int] = []
    ys: list[float] = []
    err: list[list[float]] = [[], []]
    for r in sorted(rows, key=_scale_key):
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
            low, high = whiskers(m)
            err[0].append(low)
            err[1].append(high)
        xs.append(scales.index(_scale_key(r)))
    return xs, ys, err


def _rings(ax: Axes, at: Sequence[tuple[int, float]], marker: str, colour: str, label: str) -> None:
    """Hollow marks around the points at (x, y): the scale charts' warnings (a speedup to distrust, no convergence)."""
    ax.plot(
        [x for x, _ in at],
        [y for _, y in at],
        ls="none",
        marker=marker,
        ms=12,
        mfc="none",
        mec=colour,
        mew=1.5,
        label=label,
        zorder=4,
    )


def _value_axis(ax: Axes, scales: list[ScaleKey], speedup: bool, low: float, top: float) -> None:
    """The scale chart's y axis: speedup on a log-2 scale with the ideal line, or samples/s from zero."""
    if speedup:
        ax.plot(range(len(scales)), [s[0] for s in scales], ls="--", color="#8a929b", lw=1.2, label="ideal (linear)")
        ax.set_ylabel("speedup over 1 device")
        ax.set_yscale("log", base=2)
        ticks = [2.0**e for e in range(int(np.floor(np.log2(low))), int(np.ceil(np.log2(top))) + 1)]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    else:
        ax.set_ylabel("samples/s (higher is better)")
        ax.set_ylim(bottom=0)


def _scale_lines(
    sec: Section,
    cc: dict[Column, str],
    config: tuple[int, tuple[str, ...]],
    speedup: bool,
    unconverged: Mapping[int, str] | None = None,
) -> Chart | None:
    """Throughput (or speedup, with the ideal line) against the scale, one line per framework, for one row
    configuration (batch per device and what sets it apart); a point that did not converge ringed."""
    rows = [r for r in sec.rows if r.config == config]
    bs, variant = config
    scales = sorted({_scale_key(r) for r in rows})
    if len({s[0] for s in scales}) < 2:
        return None
    fig, ax = figure()
    low, top = 1.0, float(scales[-1][0])
    for col in sec.columns:
        xs, ys, err = _series(sec, rows, col, speedup, scales)
        if xs:
            low, top = min(low, *ys), max(top, *ys)
            ax.errorbar(
                xs, ys, yerr=None if speedup else err, color=cc[col], marker="o", ms=5, lw=2, capsize=3, label=col.title
            )
    if not ax.lines:
        return None
    over = [
        (scales.index(_scale_key(r)), cell.scaling.speedup)
        for r in rows
        for col in sec.columns
        if (cell := sec.cell(r, col)) is not None and cell.ok and cell.scaling and cell.scaling.efficiency > 1
    ]
    if speedup and over:  # the marks the tables give: an efficiency above 100% is not a speedup to trust
        _rings(ax, over, "o", FAIL_COLOR, "above 100% efficiency: not a speedup to trust")
    marked = _unconverged_marks(sec, rows, scales, speedup, unconverged or {})
    if marked:
        _rings(ax, [(x, y) for x, y, _ in marked], "s", "#b7791f", f"{NOT_CONVERGED_MARK} did not converge")
    _value_axis(ax, scales, speedup, low, top)
    _scale_axis(ax, scales)
    what, apart = "Speedup" if speedup else "Throughput", "".join(f", {v}" for v in variant)
    ax.set_title(f"{what} vs scale, batch {bs} per device" + (f"\n{' '.join(variant)}" if variant else ""))
    ax.legend(loc="upper left")
    caption = "Points: throughput; whiskers: 95% CI over repeats (none below 3 repeats)."
    if speedup:
        caption = "Speedup = throughput / 1-device throughput of the same configuration; the dashed line is ideal." + (
            " A red ring marks an efficiency above 100%, which the tables mark as not a speedup to trust."
            if over
            else ""
        )
    if marked:
        caption += f" A square marks a point that did not converge. {mark_note(v for _, _, v in marked)}"
    slug = f"{sec.slug}-{'speedup' if speedup else 'scale'}-bs{bs}" + (
        f"-{sec.configs.index(config)}" if variant else ""
    )
    return Chart(slug, f"{what} vs scale, batch {bs}{apart}", caption, fig)


def _unconverged_marks(
    sec: Section, rows: list[RowKey], scales: list[ScaleKey], speedup: bool, unconverged: Mapping[int, str]
) -> list[tuple[int, float, str]]:
    """(x, y, verdict) of the ok points of these rows that did not converge, where their line has a point."""
    out = []
    for r in rows:
        for col in sec.columns:
            cell = sec.cell(r, col)
            if cell is None or not cell.ok or cell.point.id not in unconverged:
                continue
            m = cell.point.result.metrics
            assert m is not None
            y = (1.0 if r.devices == 1 else cell.scaling.speedup if cell.scaling else None) if speedup else m.throughput
            if y is not None:
                out.append((scales.index(_scale_key(r)), y, unconverged[cell.point.id]))
    return out


@styled
def throughput_charts(sec: Section, cc: dict[Column, str], unconverged: Mapping[int, str] | None = None) -> ChartSet:
    """Throughput vs scale per batch group (bars when only one scale was measured) and speedup vs ideal; the
    points in `unconverged` (point id -> verdict: their convergence run did not converge) are marked."""
    unconverged = unconverged or {}
    out = ChartSet()
    if not any(c.ok for c in sec.cells.values()):  # nothing to draw: one line, not an empty chart
        counts = Counter(c.status_text for c in sec.cells.values())
        out.notes.append(
            f"{sec.title}: no point measured a throughput ("
            + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            + ")."
        )
        return out
    # A configuration (batch and what sets it apart) with ok points at two scales or more gets scaling lines; the
    # others stand as bars, so that none is left out of the charts.
    ok_scales = {
        c: {
            r.devices
            for r in sec.rows
            if r.config == c and any((x := sec.cell(r, col)) is not None and x.ok for col in sec.columns)
        }
        for c in sec.configs
    }
    lines = [c for c in sec.configs if len(ok_scales[c]) > 1]
    single = [r for r in sec.rows if r.config not in lines]
    if single:
        out.charts.append(_bars(sec, cc, single, unconverged))
    if len(sec.scales) < 2:
        out.notes.append(f"{sec.title}: speedup needs more than one scale; only {sec.rows[0].scale} was measured.")
        return out
    for config in lines:
        scales = [r.devices for r in sec.rows if r.config == config]
        if len(scales) != len(set(scales)):  # several strategies at one scale: one line per framework would zigzag
            out.notes.append(
                f"{sec.title}, batch {config[0]}{''.join(' · ' + v for v in config[1])}: several "
                "strategies at one scale; their lines are under Gradient strategies."
            )
            continue
        for speedup in (False, True):
            chart = _scale_lines(sec, cc, config, speedup, unconverged)
            if chart is not None:
                out.charts.append(chart)
    return out


def _config_label(row: RowKey, col: Column, many_rows: bool) -> str:
    return f"{col.title} · {row.chart_label}" if many_rows else col.title


def signed_percent(axis: Axis) -> Callable[[float, float], str]:
    """A tick formatter '+0.25%' with as many decimals as the ticks' spacing needs (a spread under 1% read
    '-0%' and '+0%' on every tick with none), and no '-0'."""

    def fmt(x: float, _: float) -> str:
        locs = np.diff(np.sort(axis.get_majorticklocs()))
        step = float(locs[locs > 0].min()) if (locs > 0).any() else 1.0
        decimals = max(0, int(np.ceil(-np.log10(step) - 1e-9)))
        return f"{round(x, decimals) + 0.0:+.{decimals}f}%"

    return fmt


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
    box = ax.boxplot(
        data,
        orientation="horizontal",
        widths=0.55,
        showfliers=False,
        patch_artist=True,
        medianprops={"color": "#222", "lw": 1.5},
    )
    for patch, (_, _, colour) in zip(box["boxes"], items):
        patch.set(facecolor=colour, alpha=0.25, edgecolor=colour)
    rng = np.random.default_rng(0)
    for i, (_, v, colour) in enumerate(items, start=1):
        ax.scatter(v, i + rng.uniform(-0.18, 0.18, v.size), s=10, color=colour, alpha=0.75, lw=0, zorder=3)
    ax.set_yticks(range(1, len(items) + 1), [lab for lab, _, _ in items], fontsize=7.5)
    ax.invert_yaxis()
    ax.axvline(0, color="#8a929b", lw=0.8)
    ax.xaxis.set_major_formatter(signed_percent(ax.xaxis))
    ax.set_xlabel("step time vs the point's median (one dot per measured step)")
    ax.set_title("Spread of the raw step times")
    ax.grid(axis="y", visible=False)
    return ChartSet(
        [
            Chart(
                f"{sec.slug}-spread",
                "Spread of the raw step times",
                "Each point's step times relative to its median: boxes give the quartiles, dots every "
                "step. A wide box or far dots mean a noisy measurement.",
                fig,
            )
        ]
    )


def _memory_bars(
    ax: Axes, sec: Section, rows: list[RowKey], vals: dict[tuple[RowKey, Column], Cell | None], cc: dict[Column, str]
) -> None:
    """One bar per framework column in each batch group, its GiB above it; a failed point's status in its place."""
    slots = Slots(len(sec.columns))
    for ci, col in enumerate(sec.columns):
        for bi, row in enumerate(rows):
            cell = vals.get((row, col))
            m = cell.point.result.metrics if cell and cell.ok else None
            x = slots.x(bi, ci)
            if cell is not None and not cell.ok:
                fail_at_base(ax, cell.status_text, x)
            if m is None or m.peak_memory_bytes is None:
                continue
            gib = m.peak_memory_bytes / 2**30
            ax.bar(x, gib, slots.width * 0.92, color=cc[col], label=col.title)
            ax.annotate(
                f"{gib:.2f}" if gib < 10 else f"{gib:.1f}",
                (x, gib),
                textcoords="offset points",
                xytext=(0, 2),
                ha="center",
                fontsize=7.5,
                color="#333",
            )


@styled
def memory_chart(sec: Section, cc: dict[Column, str]) -> ChartSet:
    """Peak memory per device by batch group and framework, at the smallest scale measured."""
    devices = sec.scales[0]
    rows = [r for r in sec.rows if r.devices == devices]
    vals = {(r, c): sec.cell(r, c) for r in rows for c in sec.columns}
    kinds = {
        cell.point.result.metrics.memory_kind
        for cell in vals.values()
        if cell and cell.ok and cell.point.result.metrics and cell.point.result.metrics.peak_memory_bytes
    }
    if not kinds:
        return ChartSet(notes=[f"{sec.title}: no peak memory was recorded."])
    fig, ax = figure(6.4, 3.2)
    _memory_bars(ax, sec, rows, vals, cc)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    legend_below(ax, len(uniq), uniq)
    group_axis(ax, ["\n".join([f"batch {r.batch_size}", *r.variant]) for r in rows], any(r.variant for r in rows))
    ax.set_ylabel("GiB")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)
    kind = (
        ", ".join(sorted(kinds)).replace("rss", "worker peak RSS").replace("cuda_max_allocated", "CUDA max allocated")
    )
    ax.set_title(f"Peak memory per device ({kind})")
    return ChartSet(
        [Chart(f"{sec.slug}-memory", "Peak memory", f"Peak memory per device at {rows[0].scale}: {kind}.", fig)]
    )


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
    return ChartSet(
        [
            Chart(
                "max-batch",
                "Max batch size per framework",
                "From the max batch search: the largest per-device batch that did not run out of memory.",
                fig,
            )
        ]
    )
