"""Everything a report shows, assembled once from the store's points; html.py and markdown.py only render it."""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from dlbench import __version__
from dlbench.analysis.maxbatch import MAXBATCH_KIND, PROBE_PRESET
from dlbench.reference.mlperf import MlperfAnchor
from dlbench.report.chart_base import ChartSet, colours
from dlbench.report.charts import max_batch_chart, memory_chart, spread_chart, throughput_charts
from dlbench.report.convergence import ConvergenceCase, convergence_cases, mark_note, unconverged_points
from dlbench.report.convergence_chart import convergence_charts
from dlbench.report.efficiency import FLOPS_DEFINITION, EffRow, efficiency_rows, mfu_chart, roofline_chart
from dlbench.report.energy import contention_notes, energy_absent, energy_chart
from dlbench.report.gpt_layouts import LayoutRow, layout_chart, layout_rows
from dlbench.report.groups import Cell, Column, Section, build_sections, framework_title
from dlbench.report.history import history_charts
from dlbench.report.largest_trainable import (
    REFERENCE_NOTE,
    MaxValueRow,
    PublishedMax,
    dlperf_max_classes,
    max_value_rows,
)
from dlbench.report.llm_section import LlmRow, llm_rows
from dlbench.report.mlperf_section import DitRow, DlrmRow, LoraRow, dit_rows, dlrm_rows, lora_rows, published
from dlbench.report.moe_section import MoeRow, moe_rows
from dlbench.report.published import Beside, beside
from dlbench.report.strategies import StrategyReport, strategy_report
from dlbench.report.synthetic_vs_real import data_chart
from dlbench.report.telemetry import contended
from dlbench.report.versions import versions_charts
from dlbench.report.wide_deep_vocab import wide_deep_chart
from dlbench.spec import Protocol
from dlbench.store.store import RunRecord, StoredPoint

THROUGHPUT_DEFINITION = (
    "Throughput = global samples in the measured steps / wall time of those steps (the slowest "
    "rank's), taken per repeat; a point's figure is the preset's statistic over repeats, with a "
    "95% Student-t confidence interval. Speedup = throughput / 1-device throughput of the same "
    "configuration; efficiency = speedup / devices."
)
_FRAMEWORK_KEYS = ("framework", "framework_version")
_SHOWN_DESCRIPTIVE = ("hostname", "os", "python", "cpu_mhz", "memory_bytes", "logical_cpus", "git_commit")


@dataclass(frozen=True)
class KeyValue:
    """An environment key with its value(s); varies when the points disagree."""

    key: str
    value: str
    varies: bool = False


@dataclass
class SectionView:
    """A section with the published figures beside it, its points' FLOPs and MFU, and its charts."""

    section: Section
    beside: list[Beside]
    charts: ChartSet
    efficiency: list[EffRow] = field(default_factory=list)
    unconverged: dict[int, str] = field(default_factory=dict)  # point id -> verdict: marked throughputs (#34)

    @property
    def unconverged_note(self) -> str:
        """What the mark on a throughput means ('' where no cell has it)."""
        return mark_note(self.unconverged.values()) if self.unconverged else ""

    def efficiency_of(self, cell: Cell) -> EffRow | None:
        """The efficiency figures of a cell's point."""
        return next((e for e in self.efficiency if e.point_id == cell.point.id), None)


@dataclass
class Report:
    """The whole report, ready for a template."""

    title: str
    generated: str
    dlbench_version: str
    runs: list[RunRecord]
    identity: list[KeyValue]
    frameworks: list[KeyValue]
    descriptive: list[KeyValue]
    protocols: list[str]
    warnings: list[str]
    sections: list[SectionView]
    overall: ChartSet
    status_counts: dict[str, int]
    colours: dict[Column, str] = field(default_factory=dict)
    special: ChartSet = field(default_factory=ChartSet)  # the seeds' special cases: Wide & Deep's curves
    max_values: list[MaxValueRow] = field(default_factory=list)  # searched case-parameter maxima (face classes)
    max_reference: list[PublishedMax] = field(default_factory=list)
    max_reference_note: str = REFERENCE_NOTE
    gpt_layouts: list[LayoutRow] = field(default_factory=list)  # GPT points by parallel layout (DLPerf's GPT)
    llm: list[LlmRow] = field(default_factory=list)  # Llama points by layout and precision (#35)
    moe: list[MoeRow] = field(default_factory=list)  # MoE points by layout, with their routing (#36)
    lora: list[LoraRow] = field(default_factory=list)  # LoRA points: counts, MFU both ways (#47)
    dlrm: list[DlrmRow] = field(default_factory=list)  # DLRM points: samples, look-ups and bytes per second (#47)
    dit: list[DitRow] = field(default_factory=list)  # FLUX.1's DiT points: images/s, TFLOP/s, MFU (#48)
    mlperf: list[MlperfAnchor] = field(default_factory=list)  # MLPerf's published times of those benchmarks
    convergence: list[ConvergenceCase] = field(default_factory=list)  # --converge points by case (#34)
    convergence_charts: ChartSet = field(default_factory=ChartSet)  # one loss-curve chart per case, in order
    strategies: StrategyReport = field(default_factory=StrategyReport)  # seed 004's view: strategy studies
    definition: str = THROUGHPUT_DEFINITION
    flops_definition: str = FLOPS_DEFINITION
    notes: list[str] = field(default_factory=list)
    probes: dict[str, int] = field(default_factory=dict)  # max-search probes by status: not failures
    uids: dict[int, str] = field(default_factory=dict)  # each point's global id by its row id: reproduce commands

    @property
    def points(self) -> int:
        """How many points the report covers (max-search probes apart)."""
        return sum(self.status_counts.values())

    @property
    def probes_text(self) -> str:
        """'64 max-search probes (12 out of memory, as a search expects)', '' when there are none."""
        n = sum(self.probes.values())
        oom = self.probes.get("oom", 0)
        return (
            (
                f"{n} max-search probe{'s' if n != 1 else ''}"
                + (f" ({oom} out of memory, as a search expects)" if oom else "")
            )
            if n
            else ""
        )


def _identity(points: list[StoredPoint]) -> tuple[list[KeyValue], list[KeyValue], list[str]]:
    values: dict[str, set[str]] = defaultdict(set)
    versions: dict[str, set[str]] = defaultdict(set)
    for p in points:
        ident = p.result.env.identity
        if ident.get("framework_version"):  # a worker that died early never reported it
            versions[p.result.spec.framework].add(ident["framework_version"])
        for k, v in ident.items():
            if k not in _FRAMEWORK_KEYS:
                values[k].add(v)
    keys = sorted(values, key=lambda k: (k not in ("device", "device_model", "device_count"), k))
    identity = [KeyValue(k, ", ".join(sorted(values[k])), len(values[k]) > 1) for k in keys]
    fws = [
        KeyValue(f"{framework_title(f)} version", ", ".join(sorted(v)), len(v) > 1) for f, v in sorted(versions.items())
    ]
    warnings = [
        f"identity key {kv.key} differs between points ({kv.value}): these figures come from more than one environment"
        for kv in identity
        if kv.varies
    ]
    warnings += [f"{kv.key} ran at more than one version ({kv.value})" for kv in fws if kv.varies]
    return identity, fws, warnings


def _descriptive(points: list[StoredPoint]) -> list[KeyValue]:
    values: dict[str, set[str]] = defaultdict(set)
    for p in points:
        for k in _SHOWN_DESCRIPTIVE:
            v = p.result.env.descriptive.get(k)
            if v:
                values[k].add(
                    f"{int(v) / 2**30:.1f} GiB"
                    if k == "memory_bytes" and v.isdigit()
                    else v[:12]
                    if k == "git_commit"
                    else f"{v} MHz"
                    if k == "cpu_mhz"
                    else v
                )
    out = [
        KeyValue(k, ", ".join(sorted(values[k])[:4]) + (" ..." if len(values[k]) > 4 else ""))
        for k in _SHOWN_DESCRIPTIVE
        if values.get(k)
    ]
    times = [p.result.started for p in points if p.result.started]
    if times:
        fmt = "%Y-%m-%d %H:%M"
        first, last = (datetime.datetime.fromtimestamp(t).strftime(fmt) for t in (min(times), max(times)))
        out.append(KeyValue("measured", first if first == last else f"{first} to {last}"))
    return out


def describe_protocol(proto: Protocol) -> str:
    """'quick: 2 warm-up + 5 measured steps, 3 repeats, median'."""
    return (
        f"{proto.preset}: {proto.warmup} warm-up + {proto.steps} measured steps, {proto.repeats} repeat"
        f"{'s' if proto.repeats != 1 else ''}, {proto.statistic} over repeats"
    )


def _without_probes(runs: list[RunRecord], points: list[StoredPoint]) -> tuple[list[StoredPoint], list[StoredPoint]]:
    """(the points to show, the probes of max searches); a report of probes only shows them as points."""
    searches = {r.id for r in runs if r.kind == MAXBATCH_KIND}
    probe_ids = {p.id for p in points if p.run_id in searches or p.result.spec.protocol.preset == PROBE_PRESET}
    if len(probe_ids) == len(points):
        probe_ids = set()
    return [p for p in points if p.id not in probe_ids], [p for p in points if p.id in probe_ids]


def _section_view(sec: Section, cc: dict[Column, str]) -> SectionView:
    """One section's charts (throughput, memory, spread, MFU, roofline, energy), notes and efficiency rows."""
    unconverged = unconverged_points(c.point for c in sec.cells.values() if c.ok)
    charts = throughput_charts(sec, cc, unconverged)
    charts.extend(memory_chart(sec, cc))
    charts.extend(spread_chart(sec, cc))
    effs = efficiency_rows(sec)
    charts.extend(mfu_chart(sec, effs, cc))
    charts.extend(roofline_chart(sec, effs, cc))
    charts.extend(energy_chart(sec, cc))
    charts.notes.extend(contention_notes(sec))
    return SectionView(sec, beside(sec), charts, effs, unconverged)


def _overall(
    sections: list[Section], points: list[StoredPoint], pool: list[StoredPoint] | None, cc: dict[Column, str]
) -> ChartSet:
    """The charts across sections: data, max batch, history, versions, and where energy is absent."""
    overall = data_chart(sections, cc)
    overall.extend(max_batch_chart(points, cc))
    overall.extend(history_charts(points, pool if pool is not None else points))
    overall.extend(versions_charts(points))
    overall.notes.extend(energy_absent([p.result for p in points]))
    return overall


def _left_out_notes(points: list[StoredPoint], views: list[SectionView], probes: list[StoredPoint]) -> list[str]:
    """What the tables leave out, said: earlier exact repeats, and the probes of max searches."""
    shown = {c.point.id for v in views for c in v.section.cells.values()}
    hidden = len(points) - len(shown)
    notes = []
    if hidden:
        notes.append(
            f"{hidden} earlier exact repeat(s) of a configuration (same spec and identity keys) are not shown: "
            "the newest is, with the count beside it. Points that differ in anything else have rows or "
            "columns of their own."
        )
    if probes:
        notes.append(
            f"{len(probes)} probe point(s) of max searches are not in the tables: the searches' outcomes "
            "are in the max batch chart and the largest-value table."
        )
    return notes


def _status_counts(points: list[StoredPoint]) -> dict[str, int]:
    """Points per status, contended ones apart (as run's table says)."""
    return dict(
        Counter("ok, contended" if p.result.status == "ok" and contended(p.result) else p.result.status for p in points)
    )


def build_report(
    runs: list[RunRecord], points: list[StoredPoint], title: str = "", pool: list[StoredPoint] | None = None
) -> Report:
    """Sections, published figures, charts, environment and protocol of the given runs' points; 1-device
    points for speedups may come from pool (the whole store). The probes of max searches (their runs' kind) are
    counted apart, not as failures, and left out of the tables when other points are there."""
    points, probes = _without_probes(runs, points)
    sections = build_sections(points, pool)
    cc = colours(
        sorted({c for s in sections for c in s.columns}, key=lambda c: (c.framework, c.compile, c.channels_last))
    )
    views = [_section_view(sec, cc) for sec in sections]
    overall = _overall(sections, points, pool, cc)
    identity, fws, warnings = _identity(points)
    protos = Counter(describe_protocol(p.result.spec.protocol) for p in points)
    if len(protos) > 1:
        warnings.append("points were measured under different protocols; compare figures within one protocol")
    special, maxima = wide_deep_chart(points, cc), max_value_rows(points)
    converging = convergence_cases(points, pool)
    layouts = layout_rows(points)
    special.extend(layout_chart(layouts, cc))
    if not special.charts and not maxima:  # no special-case section: say so where the other absent charts do
        overall.notes.extend(special.notes)
        special = ChartSet()
    return Report(
        title=title or "dlbench report",
        generated=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        dlbench_version=__version__,
        runs=runs,
        identity=identity,
        frameworks=fws,
        descriptive=_descriptive(points),
        protocols=[f"{k} ({n} point{'s' if n != 1 else ''})" for k, n in protos.most_common()],
        warnings=warnings,
        sections=views,
        overall=overall,
        status_counts=_status_counts(points),
        colours=cc,
        notes=_left_out_notes(points, views, probes),
        probes=dict(Counter(p.result.status for p in probes)),
        special=special,
        max_values=maxima,
        max_reference=dlperf_max_classes(),
        gpt_layouts=layouts,
        strategies=strategy_report(sections),
        uids={p.id: p.uid for p in points},
        llm=llm_rows(points),
        moe=moe_rows(points),
        lora=(lora := lora_rows(points)),
        dlrm=(dlrm := dlrm_rows(points)),
        dit=dit_rows(points),
        mlperf=published(points, lora, dlrm),
        convergence=converging,
        convergence_charts=convergence_charts(converging),
    )


__all__ = ["Column", "KeyValue", "Report", "SectionView", "build_report", "describe_protocol"]
