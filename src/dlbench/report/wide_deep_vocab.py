"""The seeds' special cases in the report: Wide & Deep's latency per iteration and peak memory against vocabulary
size (DLPerf's figures), each framework a line, out-of-memory points marked, DLPerf's published table beside.

Plain points in, one matplotlib figure out (chart_base's style); no framework is imported.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from dlbench.report.chart_base import FAIL_COLOR, PALETTE, Chart, ChartSet, styled
from dlbench.report.groups import Column
from dlbench.report.table import fmt_count
from dlbench.store.store import StoredPoint

SEARCHED = "vocab"  # the case parameter the chart's x axis reads
MODEL = "wide_deep"


@dataclass(frozen=True)
class PublishedWdl:
    """One row of DLPerf's Wide & Deep table: latency (ms) and memory (MB) per framework; None = OOM."""

    vocab: int
    oneflow_ms: float
    hugectr_ms: float | None
    oneflow_mb: int
    hugectr_mb: int | None


# Seed 003 (DLPerf v1.0, "Wide and Deep Learning"): batch 16384, embedding 32, 7 hidden layers, on
# Tesla V100-SXM2-16GB (OneFlow 0.2.0, HugeCTR 2.2); HugeCTR ran out of memory from 51.2 M.
DLPERF_WDL: tuple[PublishedWdl, ...] = (
    PublishedWdl(3_200_000, 22.414, 21.843, 1115, 3217),
    PublishedWdl(6_400_000, 22.314, 26.375, 1153, 4579),
    PublishedWdl(12_800_000, 22.352, 36.214, 1227, 7299),
    PublishedWdl(25_600_000, 22.399, 57.718, 1379, 12745),
    PublishedWdl(51_200_000, 22.31, None, 1685, None),
    PublishedWdl(102_400_000, 22.444, None, 2293, None),
    PublishedWdl(204_800_000, 22.403, None, 3499, None),
    PublishedWdl(409_600_000, 22.433, None, 5915, None),
    PublishedWdl(819_200_000, 22.407, None, 10745, None),
)


@dataclass(frozen=True)
class VocabPoint:
    """One measured point of the curve: its vocabulary, median step (ms) and peak memory (MiB), or its status."""

    vocab: int
    step_ms: float | None
    peak_mib: float | None
    status: str


def vocab_curves(points: list[StoredPoint]) -> dict[tuple[str, str, int, str], list[VocabPoint]]:
    """wide_deep points by (framework, device, batch, sparse), each a curve sorted by vocabulary; a later point
    of the same configuration replaces an earlier one."""
    latest: dict[tuple[str, str, int, str, int], VocabPoint] = {}
    for p in sorted(points, key=lambda p: p.result.started or 0.0):
        s, m = p.result.spec, p.result.metrics
        vocab = s.params.get(SEARCHED)
        if s.model != MODEL or vocab is None:
            continue
        sparse = "dense" if s.params.get("sparse") == 0 else "sparse"
        ok = p.result.status == "ok" and m is not None
        latest[(s.framework, s.device, s.batch_size, sparse, vocab)] = VocabPoint(
            vocab,
            m.median_step_s * 1000 if ok and m else None,
            m.peak_memory_bytes / 2**20 if ok and m and m.peak_memory_bytes is not None else None,
            p.result.status,
        )
    curves: dict[tuple[str, str, int, str], list[VocabPoint]] = defaultdict(list)
    for (fw, dev, bs, sparse, _), v in latest.items():
        curves[(fw, dev, bs, sparse)].append(v)
    return {k: sorted(v, key=lambda x: x.vocab) for k, v in sorted(curves.items())}


def _mark_oom(ax: Axes, vocab: int) -> None:
    """An out-of-memory point: a cross on the x axis' top edge, 'OOM' under it (no figure: it did not fit)."""
    ax.plot(vocab, 0.96, marker="x", ms=7, mew=2, color=FAIL_COLOR, transform=ax.get_xaxis_transform(), clip_on=False)
    ax.annotate(
        "OOM",
        (vocab, 0.96),
        xycoords=ax.get_xaxis_transform(),
        textcoords="offset points",
        xytext=(0, -11),
        ha="center",
        fontsize=7,
        color=FAIL_COLOR,
    )


def _published_lines(ax: Axes, field: str) -> None:
    """DLPerf's published OneFlow and HugeCTR curves (V100) of the step time or memory, dashed and dotted."""
    rows = [
        (
            r.vocab,
            r.oneflow_ms if field == "step_ms" else r.oneflow_mb,
            r.hugectr_ms if field == "step_ms" else r.hugectr_mb,
        )
        for r in DLPERF_WDL
    ]
    ax.plot(
        [r[0] for r in rows],
        [r[1] for r in rows],
        ls="--",
        color="#7f7f7f",
        lw=1,
        label="DLPerf OneFlow (V100, published)",
    )
    hc = [(r[0], r[2]) for r in rows if r[2] is not None]
    ax.plot(
        [v for v, _ in hc],
        [y for _, y in hc],
        ls=":",
        color="#7f7f7f",
        lw=1,
        label="DLPerf HugeCTR (V100, published; OOM from 51.2M)",
    )


def _panel(
    ax: Axes,
    curves: dict[tuple[str, str, int, str], list[VocabPoint]],
    cc: dict[Column, str],
    field: str,
    published: bool,
) -> None:
    """One panel (step time or memory) over vocabulary size: a curve per configuration, OOMs marked, DLPerf's
    published curves where asked, a log x axis."""
    for i, (key, pts) in enumerate(curves.items()):
        fw, dev, bs, sparse = key
        colour = cc.get(Column(fw, False, False), PALETTE[i % len(PALETTE)])
        ok = [(p.vocab, getattr(p, field)) for p in pts if getattr(p, field) is not None]
        label = f"{fw} {dev} bs{bs}" + (" dense" if sparse == "dense" else "")
        if ok:
            ax.plot([v for v, _ in ok], [y for _, y in ok], marker="o", ms=3.5, color=colour, label=label)
        for p in pts:
            if p.status == "oom":
                _mark_oom(ax, p.vocab)
    if published:
        _published_lines(ax, field)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_count(round(v)) if v >= 1 else ""))
    ax.xaxis.set_minor_formatter(FuncFormatter(_minor_tick))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("vocabulary size")


def _minor_tick(v: float, _: object) -> str:
    """A log axis' minor label only at 2x and 5x a power of ten (3.2M doublings fall between them)."""
    lead = f"{v:.0e}"[0]
    return fmt_count(round(v)) if v >= 1 and lead in "25" else ""


@styled
def wide_deep_chart(points: list[StoredPoint], cc: dict[Column, str]) -> ChartSet:
    """DLPerf's Wide & Deep figures from the measured points: median step time and peak memory against
    vocabulary, a line per framework (and device, batch, sparse or dense tables), OOM points marked."""
    curves = vocab_curves(points)
    if not curves:
        at_default = sum(p.result.spec.model == MODEL for p in points)
        note = (
            f"Wide & Deep: the {at_default} wide_deep point(s) here ran at the case's default vocabulary; the "
            "vocabulary chart needs points at set vocabularies (`--param vocab=3.2M,6.4M`)."
            if at_default
            else "Wide & Deep: no wide_deep point in these runs."
        )
        return ChartSet(notes=[note])
    published = any(dev == "cuda" and bs == 16384 for _, dev, bs, _ in curves)
    fig = Figure(figsize=(9.6, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    _panel(left, curves, cc, "step_ms", published)
    left.set_ylabel("median step time (ms)")
    left.set_title("Latency per iteration")
    _panel(right, curves, cc, "peak_mib", published)
    right.set_ylabel("peak memory (MiB)")
    right.set_title("Peak memory")
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(3, max(1, len(labels))))
    caption = (
        "DLPerf's Wide & Deep study: the median time of one training step and the peak memory (device "
        "allocator on a GPU, resident set on the CPU) as the embedding vocabulary grows; a red x marks a "
        "vocabulary that ran out of memory. "
    )
    caption += (
        "Dashed grey: DLPerf's published OneFlow and HugeCTR figures (V100 16 GB, batch 16384); compare "
        "shapes, not values, unless the hardware matches."
        if published
        else "DLPerf's published V100 figures are not drawn: these points are not at its batch 16384 on a GPU."
    )
    return ChartSet([Chart("wide-deep-vocab", "Wide & Deep: latency and memory against vocabulary", caption, fig)])


__all__ = ["DLPERF_WDL", "PublishedWdl", "VocabPoint", "vocab_curves", "wide_deep_chart"]
