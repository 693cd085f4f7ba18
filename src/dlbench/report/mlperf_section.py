"""The report's section for MLPerf's two workloads (#47): every LoRA point with its trainable and frozen counts,
tokens/s and MFU by the LoRA FLOP count and by the full-model one; every DLRM point with samples/s, look-ups/s and
embedding bytes/s; and MLPerf's published single-node times of each benchmark beside them."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis.llm import llm_figures
from dlbench.cases import UnknownCase, get_case
from dlbench.cases.arch import DlrmArch
from dlbench.cases.dlrm import embedding_bytes_per_sample, lookups_per_sample
from dlbench.cases.lora import lora_of
from dlbench.reference.mlperf import MlperfAnchor, anchors
from dlbench.report.convergence import unconverged_of, with_mark
from dlbench.spec import SpecError
from dlbench.store.store import StoredPoint


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


def _label(params: dict[str, int]) -> str:
    return " " + ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else ""


def _layout(world: int, fsdp: bool, params: dict[str, int]) -> str:
    if world == 1:
        return "one device"
    if params.get("sharding") == 1:
        return f"table-wise {world}"
    return f"FSDP{world}" if fsdp else f"DP{world}"


def _pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def lora_rows(points: list[StoredPoint]) -> list[LoraRow]:
    """A row per LoRA point, by case and layout."""
    rows = []
    for p in points:
        r, s = p.result, p.result.spec
        try:
            case = get_case(s.model).configured(s.params)
        except (UnknownCase, SpecError):
            continue
        if lora_of(case) is None:
            continue
        f, verdict = llm_figures(r), unconverged_of(r)
        rows.append(
            LoraRow(
                case=s.model + _label(s.params),
                framework=s.framework,
                layout=_layout(s.world_size, s.layout.fsdp, s.params),
                precision=s.precision,
                trainable=f"{case.param_count:,}",
                frozen=f"{f.params_frozen:,}" if f and f.params_frozen else "-",
                tokens_per_s_per_device=with_mark(f"{f.tokens_per_s_per_device:,.0f}", verdict) if f else "-",
                mfu=_pct(f.mfu if f else None),
                mfu_full_model=_pct(f.mfu_full_model if f else None),
                status=r.status,
                unconverged=verdict,
            )
        )
    return sorted(rows, key=lambda x: (x.case, x.layout, x.framework, x.precision))


def dlrm_rows(points: list[StoredPoint]) -> list[DlrmRow]:
    """A row per DLRM point: samples/s, look-ups/s and embedding bytes/s (fp32 tables: every backend keeps them
    in fp32)."""
    rows = []
    for p in points:
        r, s = p.result, p.result.spec
        try:
            case = get_case(s.model).configured(s.params)
        except (UnknownCase, SpecError):
            continue
        if not isinstance(case.arch, DlrmArch):
            continue
        m, verdict = r.metrics, unconverged_of(r)
        rate = m.throughput if m is not None and r.status == "ok" else None
        rows.append(
            DlrmRow(
                case=s.model + _label(s.params),
                framework=s.framework,
                layout=_layout(s.world_size, False, s.params),
                precision=s.precision,
                samples_per_s=with_mark(f"{rate:,.0f}", verdict) if rate is not None else "-",
                lookups_per_s=f"{rate * lookups_per_sample(case.arch):,.0f}" if rate is not None else "-",
                embedding_gb_per_s=f"{rate * embedding_bytes_per_sample(case.arch) / 1e9:.3g}" if rate else "-",
                status=r.status,
                unconverged=verdict,
            )
        )
    return sorted(rows, key=lambda x: (x.case, x.layout, x.framework, x.precision))


def published(lora: list[LoraRow], dlrm: list[DlrmRow]) -> list[MlperfAnchor]:
    """MLPerf's single-node times of the benchmarks the report's points belong to (LoRA, DLRM)."""
    wanted = {"llama2_70b"} if lora else set()
    wanted |= {"dlrm_v2"} if dlrm else set()
    return [a for a in anchors() if a.model in wanted]


__all__ = ["DlrmRow", "LoraRow", "dlrm_rows", "lora_rows", "published"]
