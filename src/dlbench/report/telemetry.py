"""How the machine's state around each point is shown: the contention flag, samples per kWh and cost, the GPU
clocks while measured, as `run`'s notes and table cell, CSV columns, and the report's chart of throughput
against samples per kWh. The figures come from machine/telemetry.py; this module only arranges and draws them.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.machine.telemetry import Telemetry, ThreadChoice, telemetry_of
from dlbench.records import PointResult

ENERGY_DEFINITION = (
    "Samples per kWh = global samples trained in the measured windows / the energy of those windows "
    "(NVML's energy counter summed over the point's GPUs, or the CPU packages' RAPL counters)."
)


def point_label(r: PointResult) -> str:
    """framework, model, batch, precision (and scale on several devices) of a point, for a note."""
    s = r.spec
    return f"{s.framework_label} {s.model} bs{s.batch_size} {s.precision}" + (f" {s.scale}" if s.world_size > 1 else "")


def contended(r: PointResult) -> bool:
    """Whether the point was measured under contention (or started on a busy GPU)."""
    t = telemetry_of(r)
    return t is not None and t.flagged


def samples_per_kwh(r: PointResult) -> float | None:
    """The point's samples per kWh, None where its energy is unknown."""
    t = telemetry_of(r)
    return t.energy.samples_per_kwh if t is not None and r.metrics is not None else None


def fmt_energy(r: PointResult) -> str:
    """'12.3k' samples per kWh, or '-'."""
    v = samples_per_kwh(r)
    if v is None:
        return "-"
    return f"{v / 1e6:,.3g}M" if v >= 1e6 else f"{v / 1e3:,.3g}k" if v >= 1e3 else f"{v:,.3g}"


def telemetry_fields(r: PointResult, empty: object = "") -> dict[str, object]:
    """The point's telemetry as flat fields, derived figures included (`empty` where unknown: '' for CSV)."""
    t = telemetry_of(r)
    if t is None:
        return dict.fromkeys(CSV_FIELDS, empty)
    c, e = t.contention, t.energy
    sm = t.clocks.get("sm_mhz")
    out: dict[str, object] = {
        "contention_share": c.others_share,
        "contended": t.flagged,
        "load_1m": c.load_avg[0] if c.load_avg else None,
        "gpu_other_processes": c.gpu_other_processes,
        "idle_at_start": t.idle_at_start,
        "energy_j": e.joules,
        "avg_watts": e.avg_watts,
        "samples_per_kwh": samples_per_kwh(r),
        "energy_source": e.source if e.joules is not None else f"unavailable: {e.reason}",
        "cost_per_million": e.cost_per_million(r.metrics.throughput if r.metrics else None),
        "sm_clock_median_mhz": sm.median if sm else None,
    }
    return {k: empty if v is None else v for k, v in out.items()}


CSV_FIELDS: tuple[str, ...] = (
    "contention_share",
    "contended",
    "load_1m",
    "gpu_other_processes",
    "idle_at_start",
    "energy_j",
    "avg_watts",
    "samples_per_kwh",
    "energy_source",
    "cost_per_million",
    "sm_clock_median_mhz",
)


def threads_text(c: ThreadChoice) -> str:
    """'1 thread of 2 cores (--threads auto: others held 51% of the CPUs just before the point: ...)'."""
    each = " per rank" if c.ranks > 1 else ""
    return (
        f"{c.used} thread{'s' * (c.used != 1)}{each} of {c.cores} core{'s' * (c.cores != 1)} "
        f"(--threads {c.requested}: {c.reason})"
    )


def _clock_text(t: Telemetry) -> str:
    sm, mem = t.clocks.get("sm_mhz"), t.clocks.get("mem_mhz")
    if sm is None:
        return ""
    text = f"SM clock {sm.min:.0f}/{sm.median:.0f}/{sm.max:.0f} MHz (min/median/max while measured)"
    return text + (f", memory {mem.median:.0f} MHz" if mem else "")


def telemetry_notes(results: Sequence[PointResult]) -> list[str]:
    """`run`'s lines under the table: contended points, busy GPUs at start, energy and cost, clocks."""
    lines: list[str] = []
    unavailable: set[str] = set()
    for r in results:
        t = telemetry_of(r)
        if t is None or r.status != "ok":
            continue
        label = point_label(r)
        if t.threads is not None and t.threads.requested == "auto" and t.threads.needed_share < 1.0:
            lines.append(f"{label}: {threads_text(t.threads)}")
        if t.contention.flagged:
            lines.append(f"{label}: measured under contention: {t.contention.describe()}")
        busy = [d for d in t.idle if not d.idle]
        if busy:
            lines.append(
                f"{label}: GPU(s) not idle before it started: "
                + ", ".join(
                    f"{d.device} with {d.processes or 0} process(es), {(d.used_bytes or 0) / 2**30:.1f} GiB used"
                    for d in busy
                )
            )
        e = t.energy
        if e.joules is not None and e.samples_per_kwh is not None:
            cost = e.cost_per_million(r.metrics.throughput if r.metrics else None)
            lines.append(
                f"{label}: {e.samples_per_kwh:,.0f} samples/kWh, {e.avg_watts or 0:,.0f} W average "
                f"({e.source})"
                + (
                    f"; {cost:,.4g} per million samples at {e.price_per_hour:g} per device-hour"
                    if cost is not None
                    else ""
                )
            )
        else:
            unavailable.add(e.reason or "unknown")
            cost = e.cost_per_million(r.metrics.throughput if r.metrics else None)
            if cost is not None:
                lines.append(f"{label}: {cost:,.4g} per million samples at {e.price_per_hour:g} per device-hour")
        if _clock_text(t):
            lines.append(f"{label}: {_clock_text(t)}")
    if unavailable:
        lines.append("energy not measured: " + "; ".join(sorted(unavailable)))
    return lines


__all__ = [
    "CSV_FIELDS",
    "ENERGY_DEFINITION",
    "contended",
    "fmt_energy",
    "point_label",
    "samples_per_kwh",
    "telemetry_fields",
    "telemetry_notes",
    "threads_text",
]
