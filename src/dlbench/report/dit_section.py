"""The report's rows of FLUX.1's diffusion transformer (#48), in the MLPerf section: every DiT point with its
images/s, achieved TFLOP/s and MFU by the family's FLOP convention (cases/dit.py); and which MLPerf benchmarks the
report's points belong to beyond LoRA and DLRMv2 (FLUX.1, GPT-OSS-20B, DeepSeek-V3), so that their published times
stand beside them."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis.mfu import efficiency, fmt_mfu, fmt_tflops
from dlbench.cases import UnknownCase, get_case
from dlbench.cases.arch import DitConfig
from dlbench.report.convergence import unconverged_of, with_mark
from dlbench.spec import SpecError
from dlbench.store.store import StoredPoint

# The MLPerf benchmark model (reference/mlperf_anchors.yaml) each #48 family member stands for.
BENCHMARK_OF = {
    "flux1": "flux1",
    "dit_tiny": "flux1",
    "deepseek_v3": "deepseek_v3",
    "deepseek_tiny": "deepseek_v3",
    "gpt_oss_20b": "gpt_oss_20b",
    "gpt_oss_tiny": "gpt_oss_20b",
}


@dataclass(frozen=True)
class DitRow:
    """One DiT point as the section shows it; text cells ready to print ('-' where unknown)."""

    case: str
    framework: str
    layout: str
    precision: str
    images_per_s: str
    tflops: str
    mfu: str
    status: str
    unconverged: str = ""


def dit_rows(points: list[StoredPoint]) -> list[DitRow]:
    """A row per DiT point, by case and layout."""
    rows = []
    for p in points:
        r, s = p.result, p.result.spec
        try:
            case = get_case(s.model).configured(s.params)
        except (UnknownCase, SpecError):
            continue
        if not isinstance(case.arch, DitConfig):
            continue
        m, verdict, e = r.metrics, unconverged_of(r), efficiency(r)
        rate = m.throughput if m is not None and r.status == "ok" else None
        layout = "one device" if s.world_size == 1 else f"{'FSDP' if s.layout.fsdp else 'DP'}{s.world_size}"
        rows.append(
            DitRow(
                case=s.model + (" " + ",".join(f"{k}={v}" for k, v in sorted(s.params.items())) if s.params else ""),
                framework=s.framework,
                layout=layout + (" recompute" if s.layout.recompute else ""),
                precision=s.precision,
                images_per_s=with_mark(f"{rate:,.3g}", verdict) if rate is not None else "-",
                tflops=fmt_tflops(e) if rate is not None else "-",
                mfu=fmt_mfu(e) if rate is not None else "-",
                status=r.status,
                unconverged=verdict,
            )
        )
    return sorted(rows, key=lambda x: (x.case, x.layout, x.framework, x.precision))


def benchmarks_of(points: list[StoredPoint]) -> list[str]:
    """The MLPerf benchmark models (FLUX.1, DeepSeek-V3, GPT-OSS-20B) whose members the points train."""
    found = []
    for p in points:
        model = BENCHMARK_OF.get(p.result.spec.model)
        if model is not None and model not in found:
            found.append(model)
    return found


__all__ = ["BENCHMARK_OF", "DitRow", "benchmarks_of", "dit_rows"]
