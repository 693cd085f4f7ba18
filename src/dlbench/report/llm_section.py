"""The report's decoder-pretraining section (#35): every Llama point by layout and precision, with tokens/s and
TFLOP/s per device, MFU of the precision that ran and of BF16, memory per device, and the published anchors of
the same model shape, GPU and precision beside it (reference/llm.py)."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis.llm import llm_figures
from dlbench.cases import UnknownCase, get_case
from dlbench.cases.arch import LlamaConfig
from dlbench.reference.llm import matching
from dlbench.report.convergence import unconverged_of, with_mark
from dlbench.report.digits import fmt_rate
from dlbench.store.store import StoredPoint


@dataclass(frozen=True)
class LlmRow:
    """One Llama point as the section shows it; text cells are ready to print ('-' where unknown)."""

    case: str
    framework: str
    layout: str
    precision: str
    devices: int
    tokens_per_s_per_device: str
    tflops_per_device: str
    mfu: str
    mfu_bf16: str
    memory_per_device: str
    status: str
    anchors: str
    unconverged: str = ""  # the verdict of a --converge run that did not converge: the throughput is marked


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _is_llama(model: str) -> bool:
    try:
        return isinstance(get_case(model).arch, LlamaConfig)
    except UnknownCase:
        return False


def _layout(p: StoredPoint) -> str:
    s = p.result.spec
    return s.layout.label + (" FSDP" if s.layout.fsdp else "")


def llm_rows(points: list[StoredPoint]) -> list[LlmRow]:
    """A row per Llama point, by case, layout and precision."""
    rows = []
    for p in points:
        r, s = p.result, p.result.spec
        if not _is_llama(s.model):
            continue
        f = llm_figures(r)
        found = matching(s.model, s.params, r.env.identity.get("device_model", ""), s.precision)
        anchors = (
            "; ".join(
                f"{a.stack} {a.layout}: {a.tokens_per_s_per_gpu or '-'} tok/s/GPU, "
                f"{a.tflops_per_gpu or '-'} TFLOP/s/GPU"
                for a in found
            )
            or "-"
        )
        mem = f.memory_per_device_bytes if f else None
        verdict = unconverged_of(r)
        rows.append(
            LlmRow(
                case=s.model + (" " + ",".join(f"{k}={v}" for k, v in sorted(s.params.items())) if s.params else ""),
                framework=s.framework,
                layout=_layout(p),
                precision=s.precision,
                devices=s.world_size,
                tokens_per_s_per_device=with_mark(fmt_rate(f.tokens_per_s_per_device), verdict) if f else "-",
                tflops_per_device=f"{f.model_tflops_per_device:.3g}" if f else "-",
                mfu=_pct(f.mfu) if f else "-",
                mfu_bf16=_pct(f.mfu_bf16) if f else "-",
                memory_per_device=f"{mem / 2**20:,.0f} MiB" if mem else "-",
                status=r.status,
                anchors=anchors,
                unconverged=verdict,
            )
        )
    return sorted(rows, key=lambda x: (x.case, x.devices, x.layout, x.precision))


__all__ = ["LlmRow", "llm_rows"]
