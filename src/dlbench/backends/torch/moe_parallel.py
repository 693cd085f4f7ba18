"""Expert parallelism for the torch MoE decoder (#36), on torch.distributed's own collectives.

The world's ranks form a (dp, ep) grid, expert-parallel ranks adjacent: rank r is expert rank r % ep of data
rank r // ep. Each expert-parallel group of ep ranks shares its experts (rank i holds experts i E/ep .. (i+1)
E/ep - 1, by their global index) and exchanges its tokens: per MoE layer, an ``all_to_all_single`` of the
assignment counts per expert (equal splits), then one of the assignments themselves with uneven splits (each rank
sends every other the tokens routed to its experts; their sizes are read on the host once per layer, the
dropless dispatch's one host read), the experts run on what they received, and a third
``all_to_all_single`` returns the outputs (the backward pass runs the same exchanges in reverse). Attention,
norms, embeddings and the router are replicated on every rank.

Gradients: every rank's loss is the mean over its own tokens and the ranks hold equal batches, so the point's
loss is their mean. After the backward pass the replicated parameters' gradients are all-reduced over the world
and divided by it; an expert's gradient, already summed over its expert-parallel group by the returning
all-to-all, is all-reduced over the ranks holding the same experts (its data-parallel replicas) and divided by
the world. The auxiliary load-balancing loss is each rank's own (its tokens' routing, as GShard and Megatron-LM
compute it per group), so with it the loss differs from one device's on the global batch by that term's
nonlinearity; without it (weight 0) it is one device's to fp32 rounding (tests/unit/backends/test_torch_moe_ep.py).

The all-to-all time is measured on the CPU, where gloo's collectives block (wall clock around each exchange,
forward and backward); on a GPU NCCL's are asynchronous and it is not measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from dlbench.backends.context import BuildContext
from dlbench.backends.torch import distributed
from dlbench.backends.torch.distributed import GradSync
from dlbench.backends.torch.moe import MoeFeedForward, MoeModel
from dlbench.cases.arch import MoeConfig
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


@dataclass
class ExpertGroups:
    """This rank's place in the (dp, ep) grid: its expert-parallel group (which exchanges tokens), the group of
    ranks holding the same experts (`replicas`, None when there is no data parallelism), and the clock of the
    exchanges (seconds, on the CPU)."""

    ep: Any
    replicas: Any
    ep_rank: int
    ep_size: int
    dp_size: int
    device_type: str = "cpu"
    exchange_s: list[float] = field(default_factory=lambda: [0.0])
    started: list[float] = field(default_factory=list)


def expert_groups(spec: PointSpec, device: torch.device, ctx: RankContext) -> ExpertGroups:
    """Join the process group and make the (dp, ep) grid's groups (every rank makes every group, in order)."""
    distributed.init(spec, device, ctx)
    world, ep = spec.world_size, spec.layout.expert_parallel
    dp = world // ep
    ep_groups = [dist.new_group([d * ep + i for i in range(ep)]) for d in range(dp)]
    replica_groups = [dist.new_group([d * ep + i for d in range(dp)]) for i in range(ep)] if dp > 1 else []
    rank = dist.get_rank()
    replicas = replica_groups[rank % ep] if replica_groups else None
    return ExpertGroups(ep_groups[rank // ep], replicas, rank % ep, ep, dp, device.type)


def _a2a(x: Tensor, out_splits: list[int], in_splits: list[int], g: ExpertGroups) -> Tensor:
    """One all_to_all_single of rows, timed where it blocks (the CPU)."""
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    start = time.perf_counter()
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=g.ep)
    if g.device_type == "cpu":
        g.exchange_s[0] += time.perf_counter() - start
    return out


class _Exchange(torch.autograd.Function):
    """all_to_all_single as an autograd function: the backward pass sends the gradients back the other way."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, out_splits: list[int], in_splits: list[int], g: ExpertGroups) -> Tensor:
        ctx.splits, ctx.g = (out_splits, in_splits), g
        return _a2a(x, out_splits, in_splits, g)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        out_splits, in_splits = ctx.splits
        return _a2a(grad, in_splits, out_splits, ctx.g), None, None, None


def exchange_for(g: ExpertGroups) -> Callable[[Tensor, Tensor, MoeFeedForward], Tensor]:
    """The expert-parallel exchange of one MoE layer's assignments (this module's docstring)."""

    def exchange(x: Tensor, counts: Tensor, layer: MoeFeedForward) -> Tensor:
        if not g.started:
            g.started.append(time.perf_counter())
        per = layer.cfg.num_experts // g.ep_size
        received = torch.empty_like(counts)
        start = time.perf_counter()
        dist.all_to_all_single(received, counts.contiguous(), group=g.ep)
        if g.device_type == "cpu":
            g.exchange_s[0] += time.perf_counter() - start
        # One host read per layer: this rank's counts per expert and what every source rank sends to its experts
        # ([source rank, local expert]); the all-to-all's split sizes are sums of them.
        host = torch.cat([counts, received]).tolist()
        layer.host_reads += 1
        mine, sizes = host[: counts.numel()], host[counts.numel() :]
        send = [sum(mine[r * per : (r + 1) * per]) for r in range(g.ep_size)]
        recv = [sum(sizes[r * per : (r + 1) * per]) for r in range(g.ep_size)]
        got = _Exchange.apply(x, recv, send, g)
        chunks = got.split(sizes)  # source-rank major, local expert minor
        outs: list[Tensor] = list(chunks)
        lo = g.ep_rank * per
        for j in range(per):
            idx = [r * per + j for r in range(g.ep_size)]
            y = layer.experts[str(lo + j)](torch.cat([chunks[i] for i in idx]))
            for i, part in zip(idx, y.split([sizes[i] for i in idx]), strict=True):
                outs[i] = part
        return _Exchange.apply(torch.cat(outs), send, recv, g)

    return exchange


def build(cfg: MoeConfig, ctx: BuildContext) -> MoeModel:
    """This rank's model: every replicated part and its own experts (`ctx.groups` is its ExpertGroups)."""
    g = ctx.groups
    assert isinstance(g, ExpertGroups)
    per = cfg.num_experts // g.ep_size
    mine = range(g.ep_rank * per, (g.ep_rank + 1) * per)
    return MoeModel(cfg, ctx.layout.recompute, experts=mine, exchange=exchange_for(g))


class ExpertParallelSync(GradSync):
    """Gradients after the backward pass (this module's docstring): replicated parameters all-reduced over the
    world, experts over their replicas, each divided by the world size."""

    def __init__(self, model: nn.Module, g: ExpertGroups) -> None:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.experts = [p for n, p in named if ".experts." in n]
        self.replicated = [p for n, p in named if ".experts." not in n]
        self.g = g

    def update(self, optimizer_step: Callable[[], object]) -> None:
        world = dist.get_world_size()
        for p in self.replicated:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        for p in self.experts:
            if p.grad is None:  # no token reached this expert in this step
                p.grad = torch.zeros_like(p)
            if self.g.replicas is not None:
                dist.all_reduce(p.grad, group=self.g.replicas)
            p.grad.div_(world)
        optimizer_step()


def setup(model: nn.Module, g: ExpertGroups) -> tuple[nn.Module, GradSync, dict[str, object]]:
    """The model and its gradient exchange, with what the point runs, for its facts."""
    return (
        model,
        ExpertParallelSync(model, g),
        {
            "expert_parallel": (
                f"EP{g.ep_size} x DP{g.dp_size}: experts over {g.ep_size} ranks, tokens exchanged with "
                "all_to_all_single (uneven splits); replicated parameters all-reduced over the world, experts "
                "over their replicas"
            )
        },
    )


def exchange_figures(g: ExpertGroups) -> dict[str, object]:
    """The all-to-all's seconds and their share of the training wall time since the first exchange (this
    rank's; the CPU only)."""
    if g.device_type != "cpu" or not g.started:
        return {"all_to_all": "not measured: NCCL's collectives are asynchronous (a profiler would be needed)"}
    wall = time.perf_counter() - g.started[0]
    return {
        "all_to_all_s": g.exchange_s[0],
        "all_to_all_share": g.exchange_s[0] / wall if wall > 0 else None,
        "all_to_all_how": "rank 0's wall clock around each blocking gloo exchange (forward and backward), over "
        "the wall time since the first exchange (warm-up included)",
    }


__all__ = ["ExpertGroups", "ExpertParallelSync", "build", "exchange_figures", "exchange_for", "expert_groups", "setup"]
