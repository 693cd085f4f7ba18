"""What a MoE point (#36) cannot run, decided from its spec alone: the one place that refuses (dlbench.refusals)
calls `moe_refusal` for every point. Framework-free.

`--expert-parallel` and `--routing balanced` are the moe family's options, both wired for torch only (PaddlePaddle
builds the family on one device or data parallel, #46). Expert parallelism (backends/torch/moe_parallel.py) runs
over whole (dp, ep) grids, beside data parallelism only (not yet with FSDP, tensor or pipeline parallel). The experts
must divide over the expert-parallel ranks, and a capacity factor must let each expert take at least one token of a
rank's batch: floor(factor x tokens x top_k / experts) >= 1, tokens being the rank's batch x sequence.
"""

from __future__ import annotations

import math

from dlbench.cases import get_case
from dlbench.cases.arch import MoeConfig
from dlbench.cases.gpt import sequence_length
from dlbench.spec import PointSpec, SpecError

EP_FRAMEWORKS = ("torch",)


def _unwired(spec: PointSpec) -> str | None:
    """The options only torch's MoE has, asked of another framework's (PaddlePaddle's router always routes)."""
    where = f"wired for {', '.join(EP_FRAMEWORKS)} only, not {spec.framework}"
    if spec.framework in EP_FRAMEWORKS:
        return None
    if spec.layout.expert_parallel > 1:
        return f"--expert-parallel is {where}"
    if spec.layout.routing != "learned":
        return f"--routing {spec.layout.routing} is {where}"
    return None


def moe_refusal(spec: PointSpec) -> str | None:
    """One line saying why this point's MoE options cannot run, or None (this module's docstring)."""
    try:
        case = get_case(spec.model).configured(spec.params)
    except SpecError as exc:  # top_k above the experts, a shape that cannot be built
        return str(exc)
    a = case.arch
    if not isinstance(a, MoeConfig):
        if spec.layout.expert_parallel > 1:
            return f"--expert-parallel places a MoE's experts; {case.name} has none: use a moe case (moe_tiny ...)"
        if spec.layout.routing != "learned":
            return f"--routing {spec.layout.routing} forces a MoE's router; {case.name} has none: drop it"
        return None
    ep = spec.layout.expert_parallel
    unwired = _unwired(spec)
    if unwired:
        return unwired
    if spec.world_size % ep:
        return f"--expert-parallel {ep} does not divide the point's {spec.world_size} device(s): use a device count that is a multiple of it"
    if a.num_experts % ep:
        return (
            f"{a.num_experts} experts do not divide over {ep} expert-parallel ranks: use a divisor of {a.num_experts}"
        )
    if ep > 1 and (spec.layout.fsdp or spec.layout.splits_model):
        return "--expert-parallel composes with data parallelism only so far: drop --fsdp, --tensor-parallel and --pipeline-parallel"
    if ep > 1 and spec.strategy != "none":  # ddp too: its own all-reduce would not run (#41)
        return (
            f"--expert-parallel exchanges its own gradients: strategy {spec.strategy} does not apply (drop --strategy)"
        )
    if a.capacity_factor > 0:
        tokens = spec.batch_size * sequence_length(case, spec.input_size)
        if math.floor(a.capacity_factor * tokens * a.top_k / a.num_experts) < 1:
            least = math.ceil(100 * a.num_experts / (tokens * a.top_k))
            return (
                f"capacity {round(a.capacity_factor * 100)} lets no expert take a token of a rank's {tokens} tokens "
                f"x top_k {a.top_k} over {a.num_experts} experts: the smallest that routes one is {least} (percent)"
            )
    return None


__all__ = ["EP_FRAMEWORKS", "moe_refusal"]
