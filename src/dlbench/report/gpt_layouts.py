"""DLPerf's GPT study in the report: achieved TFLOP/s per device of each GPT point by parallel layout, grouped
as DLPerf grouped its cases (data parallel, tensor parallel, 2D, pipeline), with the ideal line (the TFLOP/s one
device reaches alone: perfect scaling keeps every device that busy) and the peak memory per device beneath; and a
table of the same points with DLPerf's published OneFlow and Megatron-LM figures beside the matching cases.

TFLOP/s are the Megatron-LM count (cases/gpt.py): where a point recomputes activations, the hardware FLOPs the
devices execute, as DLPerf counted; MFU (in the table) always divides the model FLOPs. Plain points in, rows
and one matplotlib figure out; no framework is imported.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dlbench import reference
from dlbench.analysis.mfu import efficiency, fmt_mfu
from dlbench.cases import get_case
from dlbench.cases.arch import GptConfig
from dlbench.cases.gpt import layout_flops_per_sample, tokens_per_sample
from dlbench.parallel import FAMILIES
from dlbench.reference import ReferenceRow
from dlbench.report.chart_base import FAIL_COLOR, PALETTE, Chart, ChartSet, styled
from dlbench.report.convergence import unconverged_of
from dlbench.report.groups import Column, framework_title
from dlbench.spec import PointSpec, SpecError
from dlbench.store.store import StoredPoint

_NAMED = re.compile(r"^(DP|MP|2D|PP)(_PP)?_\d+x\d+x\d+_\d+_\d+x\d+$")
_GROUP_OF_PREFIX = {"DP": "DP", "MP": "TP", "2D": "2D", "PP": "PP"}
GROUP_TITLES = {"DP": "data parallel", "TP": "tensor parallel", "2D": "data x tensor", "PP": "pipeline"}
PUBLISHED_MARKERS = {"oneflow": "D", "torch": "o"}


@dataclass(frozen=True)
class Published:
    """A DLPerf figure of the same case: who, TFLOP/s per GPU, sequences/s."""

    who: str
    tflops_per_device: float
    sequences_per_s: float
    framework: str


@dataclass(frozen=True)
class LayoutRow:
    """One GPT point under one of DLPerf's case names (a point two cases share appears under both)."""

    point_id: int
    framework: str
    case: str
    group: str
    layout: str
    shape: str
    devices: int
    global_batch: int
    status: str
    sequences_per_s: float | None
    tokens_per_s: float | None
    tflops_per_device: float | None  # hardware count where recomputed (DLPerf's), else model
    model_tflops_per_device: float | None
    mfu: str
    memory_per_device: int | None
    memory_kind: str
    bubble: float
    stage_ms: str
    published: tuple[Published, ...] = ()
    unconverged: str = ""  # the verdict of a --converge run that did not converge: the throughput is marked

    @property
    def counted(self) -> str:
        """Which FLOPs the TFLOP/s count: 'hardware (recompute)' or 'model' ('-' when nothing was measured)."""
        if self.tflops_per_device is None:
            return "-"
        return "hardware (recompute)" if self.tflops_per_device != self.model_tflops_per_device else "model"


def case_names(spec: PointSpec, group_label: str) -> list[str]:
    """DLPerf's names of a point: its sweep's layout names, else <prefix>_<d>x<t>x<p>_<global batch>_<h>x<l>."""
    named = [g for g in group_label.split("+") if _NAMED.match(g)]
    if named:
        return named
    lay, arch = spec.layout, _arch(spec)
    prefix = {
        "DP": "DP",
        "TP": "MP",
        "2D": "2D",
        "PP": "DP" if lay.tensor_parallel == 1 else "MP" if lay.data == 1 else "2D",
    }
    name = prefix[lay.family] + ("_PP" if lay.pipeline_parallel > 1 else "")
    shape = f"{arch.hidden_size}x{arch.num_layers}" if arch else "?"
    return [f"{name}_{lay.triple}_{spec.global_batch}_{shape}"]


def group_of(name: str) -> str:
    """DLPerf's group of a case name: DP, TP (its MP), 2D, or PP (any *_PP)."""
    parts = name.split("_")
    return "PP" if parts[1] == "PP" or parts[0] == "PP" else _GROUP_OF_PREFIX[parts[0]]


def _arch(spec: PointSpec) -> GptConfig | None:
    try:
        arch = get_case(spec.model).configured(spec.params).arch
    except (KeyError, SpecError):
        return None
    return arch if isinstance(arch, GptConfig) else None


def _published(spec: PointSpec, arch: GptConfig, name: str) -> tuple[Published, ...]:
    """DLPerf's rows at this point's shape, layout, replica batch and devices (any precision: DLPerf's is fp16);
    of a case DLPerf ran twice under two names (DP_8x1x1 and 2D_8x1x1), the rows of this name."""
    shape = {
        "hidden": arch.hidden_size,
        "layers": arch.num_layers,
        "heads": arch.num_heads,
        "seq": arch.max_positions,
        "vocab": arch.vocab_size,
    }
    lay = spec.layout
    want = {
        "data": lay.data,
        "tensor": lay.tensor_parallel,
        "pipeline": lay.pipeline_parallel,
        "micro_batches": lay.micro_batches,
    }
    rows = [
        r
        for r in reference.load_all()
        if r.model == "gpt"
        and r.params == shape
        and r.layout == want
        and r.batch_size == spec.batch_size
        and r.devices == spec.world_size
        and r.tflops_per_device is not None
    ]
    named = [r for r in rows if f"case={name}" in r.conditions]
    return tuple(
        Published(_who(r), r.tflops_per_device, r.throughput, r.framework)  # type: ignore[arg-type]
        for r in named or rows
    )


def _who(r: ReferenceRow) -> str:
    return "Megatron-LM" if any(c == "source=Megatron-LM" for c in r.conditions) else framework_title(r.framework)


def _stage_ms(extra: dict[str, object]) -> str:
    pipe = extra.get("pipeline")
    if not isinstance(pipe, dict):
        return "-"
    fwd, bwd = pipe.get("stage_forward_ms"), pipe.get("stage_backward_ms")
    if not isinstance(fwd, list) or not isinstance(bwd, list):
        return "-"
    fmt = "/".join
    return (
        f"fwd {fmt(f'{v:.0f}' if isinstance(v, (int, float)) else '-' for v in fwd)} · "
        f"bwd {fmt(f'{v:.0f}' if isinstance(v, (int, float)) else '-' for v in bwd)} ms"
    )


def layout_rows(points: list[StoredPoint]) -> list[LayoutRow]:
    """Every GPT point (the newest per configuration and case name), by group then case order."""
    latest: dict[tuple[str, str], LayoutRow] = {}
    for p in sorted(points, key=lambda p: (p.result.started or 0.0, p.id)):
        r, s = p.result, p.result.spec
        arch = _arch(s)
        if arch is None:
            continue
        m, ok = r.metrics, r.status == "ok" and r.metrics is not None
        case = get_case(s.model).configured(s.params)
        model_f, hardware_f = layout_flops_per_sample(case, s.input_size, s.layout.recompute)
        per_dev = (m.throughput / s.world_size) if ok and m else None
        seqs = m.throughput if ok and m else None
        tokens = tokens_per_sample(s.model, s.input_size, s.params)  # the point's sequence, as the run table reads it
        for name in case_names(s, str(r.extra.get("batch_group") or "")):
            latest[(f"{s.framework} {s.precision} {s.device}", name)] = LayoutRow(
                p.id,
                s.framework,
                name,
                group_of(name),
                s.layout.label,
                f"{arch.hidden_size}x{arch.num_layers}",
                s.world_size,
                s.global_batch,
                r.status,
                seqs,
                seqs * tokens if seqs and tokens else None,
                per_dev * hardware_f / 1e12 if per_dev else None,
                per_dev * model_f / 1e12 if per_dev else None,
                fmt_mfu(efficiency(r)),
                m.peak_memory_bytes if ok and m else None,
                m.memory_kind if m else "",
                s.layout.bubble,
                _stage_ms(r.extra),
                _published(s, arch, name),
                unconverged_of(r),
            )
    order = {g: i for i, g in enumerate(_GROUP_ORDER)}
    return sorted(latest.values(), key=lambda x: (order[x.group], x.devices, x.case, x.framework))


_GROUP_ORDER = ("DP", "TP", "2D", "PP")
assert set(_GROUP_ORDER) == set(FAMILIES)


def _ideal(rows: list[LayoutRow], row: LayoutRow) -> float | None:
    """The TFLOP/s one device of the same framework reaches: the group's 1-device case, else one of the shape."""
    alone = [r for r in rows if r.framework == row.framework and r.devices == 1 and r.tflops_per_device]
    for pick in (
        [r for r in alone if r.group == row.group and r.shape == row.shape],
        [r for r in alone if r.shape == row.shape],
    ):
        if pick:
            return pick[0].tflops_per_device
    return None


@styled
def layout_chart(rows: list[LayoutRow], cc: dict[Column, str]) -> ChartSet:
    """Achieved TFLOP/s per device by case, grouped by layout, one bar per framework, the ideal as a dashed line
    over each group, DLPerf's published figures as hollow markers where a case matches; memory per device below."""
    from matplotlib.figure import Figure

    if not rows:
        return ChartSet()
    cases = list(dict.fromkeys((r.group, r.case) for r in rows))
    at = {(r.case, r.framework): r for r in rows}
    fig = Figure(figsize=(max(7.5, 0.62 * len(cases) + 2.5), 7.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    biggest = max((r.memory_per_device or 0 for r in rows), default=0)
    unit, unit_name = (2**30, "GiB") if biggest >= 2**30 else (2**20, "MiB")
    peak, marked = _draw_bars(top, bottom, rows, cases, cc, unit)
    peak = max(peak, _draw_published(top, cases, at))
    _group_bands(top, cases)
    _group_bands(bottom, cases, titles=False)
    top.set_ylim(0, max(peak, 1e-9) * 1.25)
    top.set_ylabel("achieved TFLOP/s per device")
    top.set_title("Achieved TFLOP/s per device by parallel layout")
    bottom.set_ylabel(f"peak memory per device ({unit_name})")
    bottom.set_title("Memory per device")
    bubbles = {name: r.bubble for (name, _), r in at.items() if r.bubble > 0}
    bottom.set_xticks(
        range(len(cases)),
        [n + (f" (bubble {bubbles[n]:.0%})" if n in bubbles else "") for _, n in cases],
        rotation=60,
        ha="right",
        fontsize=7,
    )
    handles, labels = top.get_legend_handles_labels()
    seen = {label: h for h, label in zip(handles, labels) if not label.startswith("_")}
    fig.legend(list(seen.values()), list(seen.keys()), loc="outside lower center", ncol=min(4, len(seen)))
    caption = _layout_caption(marked, any(r.published for r in rows))
    return ChartSet(
        [Chart("gpt-layouts", "GPT: achieved TFLOP/s and memory per device by parallel layout", caption, fig)]
    )


def _mark(ax: Any, text: str, x: float, y: float, offset: int) -> None:
    """A small bold red word upright over a bar (a failed point's status, 'above ideal')."""
    ax.annotate(
        text,
        (x, y),
        textcoords="offset points",
        xytext=(0, offset),
        ha="center",
        rotation=90,
        fontsize=7,
        color=FAIL_COLOR,
        fontweight="bold",
    )


def _draw_bars(
    top: Any, bottom: Any, rows: list[LayoutRow], cases: list[tuple[str, str]], cc: dict[Column, str], unit: int
) -> tuple[float, bool]:
    """Each framework's bars (TFLOP/s above, memory below) and its dashed ideal over each case; the highest bar,
    and whether a bar was marked above its ideal."""
    frameworks = sorted({r.framework for r in rows})
    at = {(r.case, r.framework): r for r in rows}
    width = 0.8 / len(frameworks)
    peak, marked = 0.0, False
    for fi, fw in enumerate(frameworks):
        colour = cc.get(Column(fw), PALETTE[fi % len(PALETTE)])
        bar_label, ideal_label = framework_title(fw), f"ideal {framework_title(fw)} (1 device alone)"
        for ci, (_, name) in enumerate(cases):
            row = at.get((name, fw))
            if row is None:
                continue
            x = ci - 0.4 + width * (fi + 0.5)
            if row.tflops_per_device is None:
                _mark(top, row.status, x, 0, 4)
                continue
            ideal = _ideal(rows, row)
            above = ideal is not None and row.devices > 1 and row.tflops_per_device > ideal  # as the tables mark it
            top.bar(
                x,
                row.tflops_per_device,
                width * 0.9,
                color=colour,
                label=bar_label,
                hatch="xx" if above else None,
                edgecolor=FAIL_COLOR if above else None,
            )
            if above:
                _mark(top, "above ideal", x, row.tflops_per_device, 3)
                marked = True
            bar_label = "_"
            peak = max(peak, row.tflops_per_device)
            if ideal is not None:
                top.hlines(ideal, ci - 0.45, ci + 0.45, colors=colour, linestyles="--", lw=1.1, label=ideal_label)
                ideal_label = "_"
            if row.memory_per_device is not None:
                bottom.bar(x, row.memory_per_device / unit, width * 0.9, color=colour)
    return peak, marked


def _draw_published(top: Any, cases: list[tuple[str, str]], at: dict[tuple[str, str], LayoutRow]) -> float:
    """DLPerf's published figures as hollow markers over the cases they match; the highest of them (0 if none)."""
    frameworks = sorted({fw for _, fw in at})
    peak = 0.0
    for ci, (_, name) in enumerate(cases):
        for pub in (p for fw in frameworks if (name, fw) in at for p in at[(name, fw)].published):
            top.plot(
                ci,
                pub.tflops_per_device,
                marker=PUBLISHED_MARKERS.get(pub.framework, "s"),
                ms=6,
                mfc="none",
                mec="#333",
                ls="none",
                label=f"DLPerf {pub.who} (V100, published)",
            )
            peak = max(peak, pub.tflops_per_device)
    return peak


def _layout_caption(marked: bool, published: bool) -> str:
    """The layout chart's caption: what a bar, the dashed ideal, the bubble and memory are; hatching where a bar
    was marked; the published markers, or why there are none."""
    caption = (
        "Each bar: a GPT point's achieved TFLOP/s per device (Megatron-LM's count; with activation "
        "recomputation, the hardware FLOPs the devices run, as DLPerf counted), by DLPerf's case "
        "<group>_<data>x<tensor>x<pipeline>_<global batch>_<hidden>x<layers>. Dashed: the ideal, the TFLOP/s "
        "one device of the same framework reaches alone on the group's (else the shape's) 1-device case; a "
        "layout that loses nothing to communication or bubbles stays on it. Under the cases: the bubble "
        "(P-1)/(M+P-1) a pipeline's schedule implies. Below: the peak memory of the busiest rank (device "
        "allocator on a GPU, resident set on the CPU). "
    )
    if marked:
        caption += (
            "Hatched, 'above ideal': a device of a multi-device layout beat one device alone, an efficiency "
            "above 100% that the tables mark as not a speedup to trust (a slow or noisy baseline, or more "
            "cache per device). "
        )
    return caption + (
        "Hollow markers: DLPerf's published OneFlow (diamond) and Megatron-LM (circle) figures for the same "
        "case on V100s in fp16; compare shapes, not values, unless the hardware matches."
        if published
        else "DLPerf's published V100 figures are drawn only beside points of its own cases (shape, layout and "
        "batch); these points are not."
    )


def _group_bands(ax: object, cases: list[tuple[str, str]], titles: bool = True) -> None:
    """Separate the groups by a vertical line and name them over the top panel."""
    spans: dict[str, list[int]] = defaultdict(list)
    for ci, (g, _) in enumerate(cases):
        spans[g].append(ci)
    for g, idx in spans.items():
        if idx[0] > 0:
            ax.axvline(idx[0] - 0.5, color="#9aa3ad", lw=0.8)  # type: ignore[attr-defined]
        if titles:
            ax.annotate(  # type: ignore[attr-defined]
                GROUP_TITLES[g],
                ((idx[0] + idx[-1]) / 2, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, -10),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                color="#444c56",
            )
    ax.set_xlim(-0.6, len(cases) - 0.4)  # type: ignore[attr-defined]
    ax.grid(axis="x", visible=False)  # type: ignore[attr-defined]


__all__ = ["GROUP_TITLES", "LayoutRow", "Published", "case_names", "group_of", "layout_chart", "layout_rows"]
