"""How close each point came to its device's peak: a table of FLOPs, achieved TFLOP/s, peak and MFU per section,
the "MFU by framework" chart, and a roofline-style view of achieved TFLOP/s beside the device peak.

The figures come from analysis/mfu.py (throughput x training FLOPs per sample, over the peak of the point's math
mode); this module only arranges and draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes

from dlbench.analysis.mfu import Efficiency, efficiency
from dlbench.report.chart_base import Chart, ChartSet, Slots, fail_at_base, figure, group_axis, legend_below, styled
from dlbench.report.groups import Column, RowKey, Section

FLOPS_DEFINITION = (
    "Achieved TFLOP/s = samples/s x training FLOPs per sample (2 per multiply-add of every "
    "convolution and matrix product, backward = 2x forward, no recomputation); MFU = achieved / "
    "(dense peak of the point's math mode x devices): a GPU's datasheet figure, or a CPU's "
    "instruction-set peak (physical cores x maximum clock x FLOPs per cycle of its FMA or AMX "
    "units), stored with the point when it was measured. A CPU's numpy GEMM rate is shown beside it "
    "as achievable, never as the peak; achieved FLOP/s above the peak gives no MFU."
)


@dataclass(frozen=True)
class EffRow:
    """One shown point's FLOPs, achieved TFLOP/s, device peak and MFU, with its place in the section."""

    row: RowKey
    column: Column
    point_id: int
    status: str
    eff: Efficiency

    @property
    def label(self) -> str:
        """'PyTorch · bs 8 · 1n1c'."""
        return f"{self.column.title} · {self.row.label}"

    @property
    def gflops(self) -> str:
        """Training GFLOPs per sample, '-' when not countable."""
        f = self.eff.flops_per_sample
        return "-" if f is None else f"{f / 1e9:,.2f}"

    @property
    def achieved(self) -> str:
        """Achieved TFLOP/s of all the point's devices, '-' when not measured."""
        a = self.eff.achieved_tflops
        return "-" if a is None else f"{a:,.3g}"

    @property
    def peak(self) -> str:
        """'156 TFLOP/s tf32 (datasheet, A100 SXM4 80GB) x 8', or why it is unknown."""
        p = self.eff.peak
        if p is None:
            return self.eff.note if self.eff.achieved_tflops is not None and self.eff.note else "-"
        label = p.label + (f" x {self.eff.devices}" if self.eff.devices > 1 else "")
        ach = self.eff.achievable
        if ach is not None:
            label += f"; achievable here {ach.tflops:,.3g} TFLOP/s (numpy GEMM, not the peak)"
        return f"{label}; {self.eff.note}" if self.eff.note else label

    @property
    def mfu(self) -> str:
        """'41.2%', 'above peak', 'peak unknown', or the status of a point that measured nothing."""
        if self.eff.mfu is not None:
            return f"{self.eff.mfu:.1%}"
        if self.eff.above_peak:
            return "above peak"
        return "peak unknown" if self.eff.achieved_tflops is not None else self.status

    @property
    def cell_text(self) -> str:
        """The line under a throughput cell: '4.51 TFLOP/s · MFU 41.2% (datasheet)'."""
        kind = f" ({self.eff.peak.kind})" if self.eff.peak is not None else ""
        return f"{self.achieved} TFLOP/s · MFU {self.mfu}{kind}"


def efficiency_rows(sec: Section) -> list[EffRow]:
    """Every shown point of a section, in table order, with its efficiency figures."""
    out = []
    for row in sec.rows:
        for col in sec.columns:
            cell = sec.cell(row, col)
            if cell is not None:
                r = cell.point.result
                out.append(EffRow(row, col, cell.point.id, cell.status_text if not cell.ok else "ok", efficiency(r)))
    return out


def _mfu_bar(ax: Axes, x: float, w: float, e: EffRow, colour: str, label: str | None) -> float:
    """One point's MFU bar with its percentage above it (the bar's height), or, where there is no MFU, why, written
    up from the base (0)."""
    if e.eff.mfu is None:
        fail_at_base(ax, e.mfu, x)
        return 0.0
    pct = e.eff.mfu * 100
    ax.bar(x, pct, w * 0.92, color=colour, label=label)
    ax.annotate(
        f"{pct:.3g}%", (x, pct), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7.5, color="#333"
    )
    return pct


@styled
def mfu_chart(sec: Section, rows: list[EffRow], cc: dict[Column, str]) -> ChartSet:
    """MFU by framework: batch groups on x, one bar per framework; unknown peaks and failures named at the base."""
    if not any(e.eff.achieved_tflops is not None for e in rows):
        return ChartSet(notes=[f"{sec.title}: no point measured a throughput, so no MFU."])
    at = {(e.row, e.column): e for e in rows}
    groups = list(dict.fromkeys(e.row for e in rows))  # table order: batch, what sets a row apart, devices
    slots = Slots(len(sec.columns))
    fig, ax = figure(6.4, 3.4)
    top = 0.0
    for gi, key in enumerate(groups):
        for ci, col in enumerate(sec.columns):
            e = at.get((key, col))
            if e is not None:
                label = col.title if gi == 0 else None
                top = max(top, _mfu_bar(ax, slots.x(gi, ci), slots.width, e, cc[col], label))
    labels = [
        "\n".join([f"batch {r.batch_size} · {r.devices} device{'s' if r.devices > 1 else ''}", *r.variant])
        for r in groups
    ]
    group_axis(ax, labels, any(r.variant for r in groups))
    ax.set_ylim(0, max(top, 1.0) * 1.2)
    ax.set_ylabel("MFU, % of peak (higher is better)")
    ax.set_title("MFU by framework")
    if ax.get_legend_handles_labels()[0]:
        legend_below(ax, slots.n)
    return ChartSet(
        [
            Chart(
                f"{sec.slug}-mfu",
                "MFU by framework",
                "Model-FLOPs utilisation: achieved TFLOP/s over the device peak of the point's math "
                "mode. A point whose device peak is unknown is named at the base.",
                fig,
            )
        ]
    )


@styled
def roofline_chart(sec: Section, rows: list[EffRow], cc: dict[Column, str]) -> ChartSet:
    """Achieved TFLOP/s per device of each point as a bar, beside the device's peak (a dashed ceiling), MFU
    written on each bar: the compute roof of a roofline, without the memory slope nobody measured."""
    shown = [e for e in rows if e.eff.achieved_tflops is not None]
    if not shown:
        return ChartSet()
    fig, ax = figure(6.4, max(2.2, 0.9 + 0.42 * len(shown)))
    y = np.arange(len(shown))
    per_device = [e.eff.achieved_tflops / max(e.row.devices, 1) for e in shown]  # type: ignore[operator]
    ax.barh(y, per_device, height=0.6, color=[cc[e.column] for e in shown])
    for i, (e, v) in enumerate(zip(shown, per_device)):
        text = f"{v:,.3g} · MFU {e.mfu}" if e.eff.mfu is not None else f"{v:,.3g} · {e.mfu}"
        ax.annotate(text, (v, i), textcoords="offset points", xytext=(3, 0), va="center", fontsize=7.5)
    peaks = {e.eff.peak.label: e.eff.peak.tflops for e in shown if e.eff.peak is not None}
    for label, tflops in peaks.items():
        ax.axvline(tflops, color="#444c56", ls="--", lw=1.2, label=f"peak: {label}")
    ax.set_yticks(y, [f"{e.column.title} · {e.row.chart_label}" for e in shown], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlim(0, max([*per_device, *peaks.values()]) * 1.3)
    ax.set_xlabel("TFLOP/s per device")
    ax.grid(axis="y", visible=False)
    ax.set_title("Achieved TFLOP/s beside the device peak")
    if peaks:
        fig.legend(loc="outside lower center")
    caption = (
        "Bars: achieved training TFLOP/s per device; dashed line: the device's dense peak in the point's "
        "math mode (datasheet for a GPU, instruction set for a CPU). The gap is what the framework leaves unused."
    )
    if not peaks:
        caption += " No point's device peak is known, so no ceiling is drawn."
    return ChartSet([Chart(f"{sec.slug}-roofline", "Achieved TFLOP/s beside the device peak", caption, fig)])


__all__ = ["FLOPS_DEFINITION", "EffRow", "efficiency_rows", "mfu_chart", "roofline_chart"]
