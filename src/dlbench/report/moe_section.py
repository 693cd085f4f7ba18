"""The report's MoE section (#36): every mixture-of-experts point by layout, with tokens/s and TFLOP/s (active
parameters) per device, and how its router really routed: the worst layer's imbalance (max / mean tokens per
expert), its mean over the layers in the first and last windows of steps (DeepSeek-V3's bias balance shows there,
#48), the dropped share and, where measured, the all-to-all's share of the time; forced routing marked."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis.llm import llm_figures
from dlbench.analysis.variants import row_names
from dlbench.cases import UnknownCase, get_case
from dlbench.cases.arch import MoeConfig
from dlbench.report.convergence import unconverged_of, with_mark
from dlbench.report.digits import fmt_rate
from dlbench.store.store import StoredPoint


@dataclass(frozen=True)
class MoeRow:
    """One MoE point as the section shows it; text cells ready to print ('-' where unknown)."""

    case: str
    framework: str
    layout: str
    precision: str
    devices: int
    tokens_per_s_per_device: str
    tflops_per_device: str
    imbalance: str
    dropped: str
    all_to_all: str
    status: str
    unconverged: str = ""  # the verdict of a --converge run that did not converge: the throughput is marked
    over_steps: str = "-"  # the mean imbalance of the first and last windows of steps (#48: the bias balance)


def _is_moe(model: str) -> bool:
    try:
        return isinstance(get_case(model).arch, MoeConfig)
    except UnknownCase:
        return False


def _number(routing: dict[str, object], key: str) -> float | None:
    v = routing.get(key)
    return float(v) if isinstance(v, int | float) else None


def _over_steps(routing: dict[str, object]) -> str:
    """'1.31 -> 1.08': the layers' mean imbalance in the first and last windows of training steps, '-' where the
    point has no such record (stored before #48) or one window."""
    windows = routing.get("imbalance_over_steps")
    if not isinstance(windows, list) or len(windows) < 2:
        return "-"
    first, last = (w.get("imbalance_mean") if isinstance(w, dict) else None for w in (windows[0], windows[-1]))
    if not isinstance(first, int | float) or not isinstance(last, int | float):
        return "-"
    return f"{first:.2f} -> {last:.2f}"


def moe_rows(points: list[StoredPoint]) -> list[MoeRow]:
    """A row per MoE point, by case, devices and layout."""
    rows = []
    results = [p.result for p in points if _is_moe(p.result.spec.model)]
    names = row_names(results, shown=("expert_parallel", "routing"))  # the layout column shows them
    for r, name in zip(results, names, strict=True):
        s = r.spec
        f = llm_figures(r)
        routing = r.extra.get("routing")
        routing = routing if isinstance(routing, dict) else {}
        imbalance, dropped, share = (
            _number(routing, k) for k in ("imbalance_max", "dropped_fraction", "all_to_all_share")
        )
        ep = s.layout.expert_parallel
        verdict = unconverged_of(r)
        plain = "one device" if s.world_size == 1 else f"DP{s.world_size}"
        layout = (f"EP{ep} x DP{s.world_size // ep}" if ep > 1 else plain) + (
            " (forced balanced)" if s.layout.routing == "balanced" else ""
        )
        rows.append(
            MoeRow(
                case=name,
                framework=s.framework,
                layout=layout,
                precision=s.precision,
                devices=s.world_size,
                tokens_per_s_per_device=with_mark(fmt_rate(f.tokens_per_s_per_device), verdict) if f else "-",
                tflops_per_device=f"{f.model_tflops_per_device:.3g}" if f else "-",
                imbalance=f"{imbalance:.2f}" if imbalance is not None else "-",
                dropped=f"{dropped:.1%}" if dropped is not None else "-",
                all_to_all=f"{share:.0%}" if share is not None else "-",
                status=r.status,
                unconverged=verdict,
                over_steps=_over_steps(routing),
            )
        )
    return sorted(rows, key=lambda x: (x.case, x.devices, x.layout, x.precision))


__all__ = ["MoeRow", "moe_rows"]
