"""What every backend that builds the Llama and MoE families (#46) records about a decoder point, framework-free:
the FLOPs of one sequence by the family's convention (cases/llama.py, cases/moe.py: the same figures torch's
points carry, so MFU is counted alike), and for a MoE its total and active parameters and routing policy."""

from __future__ import annotations

import math
from typing import Protocol

from dlbench.backends.base import Backend
from dlbench.cases import Case, all_cases
from dlbench.cases.arch import LlamaConfig, MoeConfig
from dlbench.cases.llama import FLOP_CONVENTION
from dlbench.cases.llama import flops_per_sample as llama_flops
from dlbench.cases.moe import point_figures


def decoder_facts(case: Case, input_size: int | None) -> dict[str, object]:
    """A decoder point's facts: ``llm_flops_per_sample`` (model and hardware FLOPs, no recompute, the convention)
    for a Llama, ``moe`` (cases/moe.point_figures) for a MoE; nothing for another case."""
    if isinstance(case.arch, MoeConfig):
        return {"moe": point_figures(case, input_size)}
    if isinstance(case.arch, LlamaConfig):
        flops = llama_flops(case, input_size)
        return {
            "llm_flops_per_sample": {
                "model": flops,
                "hardware": flops,
                "recompute": False,
                "convention": FLOP_CONVENTION,
            }
        }
    return {}


def moe_shape_refusal(case: Case) -> str | None:
    """Why a backend written from Mixtral's routing (top-k softmax or sigmoid gating, shared experts, a capacity
    factor) cannot build this MoE shape exactly (one line), or None: the refinements DeepSeek-V3 and GPT-OSS add
    (#48) are torch's. Read from the configuration's fields against Mixtral's defaults."""
    if not isinstance(case.arch, MoeConfig):
        return None
    plain = MoeConfig(
        base=case.arch.base,
        num_experts=case.arch.num_experts,
        top_k=case.arch.top_k,
        expert_ffn=case.arch.expert_ffn,
        shared_experts=case.arch.shared_experts,
        capacity_factor=case.arch.capacity_factor,
        gating=case.arch.gating,
        aux_loss_weight=case.arch.aux_loss_weight,
    )
    if case.arch != plain:
        return (
            f"{case.name} routes or attends beyond Mixtral's MoE (latent attention, dense layers, biases, sinks, "
            "sliding windows, group-limited or bias-balanced routing): only the torch backend builds it"
        )
    return None


def capacity_kept(counts: list[int], factor: float, experts: int) -> list[tuple[int, int]]:
    """Where a capacity factor keeps each expert's first floor(factor x assignments / experts) assignments (in token
    order, as torch's moe.py): the (start, kept) of each expert's slice of the assignments sorted by expert."""
    capacity = math.floor(factor * sum(counts) / experts)
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [(start, min(c, capacity)) for start, c in zip(starts, counts, strict=True)]


def routing_summary(hist: list[list[int]], assigned: int, dropped: int) -> dict[str, object]:
    """A MoE point's routing figures from the assignments each expert of each layer received (summed on the host by
    a backend whose dispatch reads its slices' lengths there anyway): per layer imbalance (max / mean), the dropped
    share; warm-up included."""
    imbalance = [max(r) / (sum(r) / len(r)) if sum(r) else float("nan") for r in hist]
    return {
        "tokens_per_expert": hist,
        "imbalance_per_layer": imbalance,
        "imbalance_max": max(imbalance),
        "imbalance_mean": sum(imbalance) / len(imbalance),
        "assignments": assigned,
        "dropped": dropped,
        "dropped_fraction": dropped / assigned if assigned else 0.0,
        "forced_balanced": False,
        "read": "summed on the host from the dispatch's per-layer counts (read there anyway), warm-up included",
    }


class Routed(Protocol):
    """A MoE model that keeps the routing its steps did."""

    def routing_figures(self) -> dict[str, object]:
        """routing_figures' record of its steps."""
        ...


class DecoderBackend(Backend):
    """A backend written from these families (Paddle, MindSpore): a MoE shape beyond Mixtral's routing is refused
    (`moe_shape_refusal`), and a MoE point's facts add the routing its steps did (`routed`, set by build)."""

    routed: Routed | None = None

    def case_support(self, case: Case) -> str | None:
        return super().case_support(case) or moe_shape_refusal(case)

    def facts(self) -> dict[str, object]:
        """What build chose; a MoE point adds the routing its steps did."""
        out = super().facts()
        if self.routed is not None:
            out["routing"] = self.routed.routing_figures()
        return out


# The members a backend written from these families builds: read from the cases (a new member needs no line
# here), a MoE only where Mixtral's routing builds it exactly.
LLAMA_MEMBERS: tuple[str, ...] = tuple(c.name for c in all_cases() if isinstance(c.arch, LlamaConfig))
MOE_MEMBERS: tuple[str, ...] = tuple(
    c.name for c in all_cases() if isinstance(c.arch, MoeConfig) and moe_shape_refusal(c) is None
)

__all__ = [
    "LLAMA_MEMBERS",
    "MOE_MEMBERS",
    "DecoderBackend",
    "Routed",
    "capacity_kept",
    "decoder_facts",
    "moe_shape_refusal",
    "routing_summary",
]
