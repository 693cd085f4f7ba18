"""The report's energy and contention views of a section: throughput against samples per kWh, and a note per
point measured under contention. Apart from report/telemetry.py, which the run table imports, so that a run
loads no matplotlib."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.machine.telemetry import telemetry_of
from dlbench.records import PointResult
from dlbench.report.chart_base import Chart, ChartSet, figure, styled
from dlbench.report.groups import Column, Section
from dlbench.report.telemetry import ENERGY_DEFINITION, contended, point_label, samples_per_kwh


@styled
def energy_chart(section: Section, colours: dict[Column, str]) -> ChartSet:
    """Throughput against samples per kWh, one dot per shown point with a known energy (nothing otherwise)."""
    pts = [
        (c, cell.point.result)
        for (_, c), cell in section.cells.items()
        if cell.ok and samples_per_kwh(cell.point.result) is not None
    ]
    if not pts:
        return ChartSet()
    fig, ax = figure(6.4, 3.6)
    for col in dict.fromkeys(c for c, _ in pts):
        mine = [r for c, r in pts if c == col]
        ax.scatter(
            [samples_per_kwh(r) or 0 for r in mine],
            [r.metrics.throughput if r.metrics else 0 for r in mine],
            color=colours.get(col, "#7f7f7f"),
            label=col.title,
            s=36,
            zorder=3,
        )
        for r in mine:
            ax.annotate(
                f"bs {r.spec.batch_size}" + (f" {r.spec.scale}" if r.spec.world_size > 1 else ""),
                (samples_per_kwh(r) or 0, r.metrics.throughput if r.metrics else 0),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
    ax.set_title("Throughput against energy")
    ax.set_xlabel("samples per kWh (higher is better)")
    ax.set_ylabel("samples/s (higher is better)")
    ax.legend(loc="best")
    flagged = sum(contended(r) for _, r in pts)
    caption = ENERGY_DEFINITION + (
        f" {flagged} of these point(s) ran under contention: their energy includes other processes' work on the CPU."
        if flagged
        else ""
    )
    return ChartSet([Chart(f"{section.slug}-energy", f"{section.title}: throughput against energy", caption, fig)])


def energy_absent(points: Sequence[PointResult]) -> list[str]:
    """One line for the report when none of its ok points has a known energy, saying why (else nothing)."""
    ok = [r for r in points if r.status == "ok"]
    if not ok or any(samples_per_kwh(r) is not None for r in ok):
        return []
    why = sorted({t.energy.reason for r in ok if (t := telemetry_of(r)) is not None and t.energy.reason})
    return [
        "No throughput-against-energy chart: no point has a measured energy"
        + (f" ({'; '.join(why)})." if why else " (points stored before dlbench recorded it).")
    ]


def contention_notes(section: Section) -> list[str]:
    """One line per shown point of a section that was measured under contention."""
    return [
        f"point {cell.point.id} ({point_label(cell.point.result)}) was measured under contention: "
        f"{t.contention.describe()}"
        for cell in section.cells.values()
        if (t := telemetry_of(cell.point.result)) is not None and cell.ok and t.flagged
    ]


__all__ = ["contention_notes", "energy_absent", "energy_chart"]
