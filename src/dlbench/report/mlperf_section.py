"""The report's section for MLPerf's workloads (#47, #48): every LoRA point with its trainable and frozen counts,
tokens/s and MFU by the LoRA FLOP count and by the full-model one; every DLRM point with samples/s, look-ups/s and
embedding bytes/s; every FLUX.1 (DiT) point with images/s, TFLOP/s and MFU by the DiT's FLOP convention; and
MLPerf's published times of the benchmarks the points belong to beside them. Rates are written as everywhere else
(report/digits.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from dlbench.analysis.llm import llm_figures
from dlbench.analysis.mfu import efficiency, fmt_mfu
from dlbench.analysis.variants import row_names
from dlbench.cases import Case, UnknownCase, get_case
from dlbench.cases.arch import DitConfig, DlrmArch
from dlbench.cases.dlrm import embedding_bytes_per_sample, lookups_per_sample
from dlbench.cases.lora import lora_of
from dlbench.records import PointResult
from dlbench.reference.mlperf import MlperfAnchor, anchors
from dlbench.report.convergence import unconverged_of, with_mark
from dlbench.report.digits import fmt_rate
from dlbench.spec import SpecError
from dlbench.store.store import StoredPoint

# The MLPerf benchmark model (reference/mlperf_anchors.yaml) each member stands for, beyond LoRA's and DLRM's own
# cases (#48): its published times stand beside the member's points.
BENCHMARK_OF = {
    "flux1": "flux1",
    "dit_tiny": "flux1",
    "deepseek_v3": "deepseek_v3",
    "deepseek_tiny": "deepseek_v3",
    "gpt_oss_20b": "gpt_oss_20b",
    "gpt_oss_tiny": "gpt_oss_20b",
}


@dataclass(frozen=True)
class LoraRow:
    """One LoRA point as the section shows it; text cells ready to print ('-' where unknown)."""

    case: str
    framework: str
    layout: str
    precision: str
    trainable: str
    frozen: str
    tokens_per_s_per_device: str
    mfu: str
    mfu_full_model: str
    status: str
    unconverged: str = ""


@dataclass(frozen=True)
class DlrmRow:
    """One DLRM point as the section shows it."""

    case: str
    framework: str
    layout: str
    precision: str
    samples_per_s: str
    lookups_per_s: str
    embedding_gb_per_s: str
    status: str
    unconverged: str = ""


@dataclass(frozen=True)
class DitRow:
    """One FLUX.1 (DiT) point as the section shows it."""

    case: str
    framework: str
    layout: str
    precision: str
    images_per_s: str
    tflops: str
    mfu: str
    status: str
    unconverged: str = ""


def _points(points: list[StoredPoint], keep: Callable[[Case], bool]) -> Iterator[tuple[PointResult, Case, str]]:
    """Each point whose configured case `keep` takes, with that case and its name as the rows print it (with what
    sets it apart from the section's other rows: a reference run's seed)."""
    kept = []
    for p in points:
        try:
            case = get_case(p.result.spec.model).configured(p.result.spec.params)
        except (UnknownCase, SpecError):
            continue
        if keep(case):
            kept.append((p.result, case))
    names = row_names([r for r, _ in kept])
    yield from ((r, case, name) for (r, case), name in zip(kept, names, strict=True))


def _layout(r: PointResult) -> str:
    s = r.spec
    if s.world_size == 1:
        text = "one device"
    elif s.params.get("sharding") == 1:
        text = f"table-wise {s.world_size}"
    else:
        text = f"FSDP{s.world_size}" if s.layout.fsdp else f"DP{s.world_size}"
    return text + (" recompute" if s.layout.recompute else "")


def _rate(r: PointResult) -> float | None:
    return r.metrics.throughput if r.metrics is not None and r.status == "ok" else None


def _pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


Row = TypeVar("Row", LoraRow, DlrmRow, DitRow)


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda x: (x.case, x.layout, x.framework, x.precision))


def lora_rows(points: list[StoredPoint]) -> list[LoraRow]:
    """A row per LoRA point, by case and layout."""
    rows = []
    for r, case, name in _points(points, lambda c: lora_of(c) is not None):
        f, verdict = llm_figures(r), unconverged_of(r)
        rows.append(
            LoraRow(
                case=name,
                framework=r.spec.framework,
                layout=_layout(r),
                precision=r.spec.precision,
                trainable=f"{case.param_count:,}",
                frozen=f"{f.params_frozen:,}" if f and f.params_frozen else "-",
                tokens_per_s_per_device=with_mark(fmt_rate(f.tokens_per_s_per_device), verdict) if f else "-",
                mfu=_pct(f.mfu if f else None),
                mfu_full_model=_pct(f.mfu_full_model if f else None),
                status=r.status,
                unconverged=verdict,
            )
        )
    return _sorted(rows)


def dlrm_rows(points: list[StoredPoint]) -> list[DlrmRow]:
    """A row per DLRM point: samples/s, look-ups/s and embedding bytes/s (fp32 tables: every backend keeps them
    in fp32)."""
    rows = []
    for r, case, name in _points(points, lambda c: isinstance(c.arch, DlrmArch)):
        assert isinstance(case.arch, DlrmArch)
        rate, verdict = _rate(r), unconverged_of(r)
        rows.append(
            DlrmRow(
                case=name,
                framework=r.spec.framework,
                layout=_layout(r),
                precision=r.spec.precision,
                samples_per_s=with_mark(fmt_rate(rate), verdict) if rate is not None else "-",
                lookups_per_s=fmt_rate(rate * lookups_per_sample(case.arch)) if rate is not None else "-",
                embedding_gb_per_s=fmt_rate(rate * embedding_bytes_per_sample(case.arch) / 1e9) if rate else "-",
                status=r.status,
                unconverged=verdict,
            )
        )
    return _sorted(rows)


def dit_rows(points: list[StoredPoint]) -> list[DitRow]:
    """A row per FLUX.1 (DiT) point: images/s, and TFLOP/s and MFU by the DiT's FLOP convention (cases/dit.py)."""
    rows = []
    for r, _, name in _points(points, lambda c: isinstance(c.arch, DitConfig)):
        rate, verdict, e = _rate(r), unconverged_of(r), efficiency(r)
        rows.append(
            DitRow(
                case=name,
                framework=r.spec.framework,
                layout=_layout(r),
                precision=r.spec.precision,
                images_per_s=with_mark(fmt_rate(rate), verdict) if rate is not None else "-",
                tflops=fmt_rate(e.achieved_tflops) if rate is not None and e.achieved_tflops is not None else "-",
                mfu=fmt_mfu(e) if rate is not None else "-",
                status=r.status,
                unconverged=verdict,
            )
        )
    return _sorted(rows)


def published(points: list[StoredPoint], lora: list[LoraRow], dlrm: list[DlrmRow]) -> list[MlperfAnchor]:
    """MLPerf's published times of the benchmarks the report's points belong to: LoRA and DLRM by their rows,
    FLUX.1, DeepSeek-V3 and GPT-OSS-20B by their members (BENCHMARK_OF); in anchors' order, each once."""
    wanted = {"llama2_70b"} if lora else set()
    wanted |= {"dlrm_v2"} if dlrm else set()
    wanted |= {m for p in points if (m := BENCHMARK_OF.get(p.result.spec.model)) is not None}
    return [a for a in anchors() if a.model in wanted]


__all__ = ["BENCHMARK_OF", "DitRow", "DlrmRow", "LoraRow", "dit_rows", "dlrm_rows", "lora_rows", "published"]
