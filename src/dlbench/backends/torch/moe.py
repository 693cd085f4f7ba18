"""A mixture-of-experts decoder in pure torch (#36): the Llama blocks (llama.py) with every MLP a routed MoE layer.

The layer, on the tokens of a batch flattened to [T, h]:
- a router (``Linear(h, experts)``, with a bias only where the shape has one: GPT-OSS) scores every expert; softmax
  gating takes the top_k probabilities and renormalises them (Mixtral's softmax over the chosen logits, GPT-OSS's),
  sigmoid gating the top_k sigmoid scores divided by their sum (DeepSeek-V3's), chosen with the layer's routing bias
  among the best groups' experts and scaled by routed_scale (routing.py: DeepSeek-V3's choice, its sequence-wise
  auxiliary loss, the bias balance after each step, the imbalance over the steps); experts are llama.py's SwiGLU
  or, with biases and GPT-OSS's clamped activation, moe_attention.py's;
- Switch Transformer's auxiliary loss ``experts x sum_i f_i P_i`` (f_i the share of the T x top_k assignments that
  chose expert i, P_i the mean gate probability of expert i; for sigmoid gating the scores normalised per token),
  kept on the layer for the trainer to add with the case's weight (models.train_loss);
- dispatch: assignments sorted by expert (a stable sort: token order within an expert), each expert's SwiGLU run on
  its contiguous slice, outputs weighted by the gate and summed back per token (``index_add_``); dropless by
  default; with a capacity factor an expert takes the first floor(factor x T x top_k / experts) of its
  assignments in token order and the rest are dropped (the token keeps its residual and its other expert);
- optional shared experts: one SwiGLU ``shared_experts x expert_ffn`` wide that every token visits;
- where the point is expert parallel, the slices travel to the rank holding their expert and back with
  ``all_to_all_single`` (moe_parallel.py); each rank then holds only its experts.

Routing is measured, never forced unless asked: each layer accumulates on the device the assignments per expert,
the dropped ones and the total, read once at the end of the point (``routing_figures``, summed over the ranks on
the device with the point's process group, as NCCL requires), not per step. With
``balanced`` (--routing balanced) the router's choice is replaced by a round-robin one (token t goes to experts
t k .. t k + k - 1 modulo experts), which reproduces force-balanced published figures only.

Host reads: routing, counting and sorting run on the device without a host read (counts by ``scatter_add_``, not
``bincount``, which sizes its output from the input's maximum read on the host on a GPU). A dropless dispatch
needs its slices' lengths on the host (``split`` and the all-to-all's split sizes): one read per layer and forward
pass, counted on the layer as it happens (``host_reads``); a capacity factor adds one
(the kept assignments' count, from a boolean index). The point records them per step (``host_sync_figures``).

Experts are named by their global index (``experts.3.w1.weight``) and initialised from a generator of that name
(llama.init_parameter), so an expert-parallel rank's experts start as one device's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from dlbench.backends.torch.distributed import GradSync
from dlbench.backends.torch.gpt import WHOLE, Part, _seeded
from dlbench.backends.torch.llama import FeedForward, LlamaBlock, LlamaModel
from dlbench.backends.torch.moe_attention import Expert, attention_for
from dlbench.backends.torch.routing import (
    BiasBalance,
    RoutingHistory,
    choose,
    imbalance_over_steps,
    sequence_aux_loss,
)
from dlbench.cases.arch import MoeConfig

# Moves [A, h] assignments grouped by expert to where their experts run and back: (inputs, counts per expert)
# -> outputs of the same shape. On one device the experts run in place (`local_experts`).
Exchange = Callable[[Tensor, Tensor, "MoeFeedForward"], Tensor]

HOST_SYNC_KEY = "host_sync_per_step"  # the point's fact (as Wide & Deep's SparseAdam records its own)


def expert_counts(chosen: Tensor, experts: int) -> Tensor:
    """Assignments per expert (int64, on the device), without a host read: bincount on a GPU reads the input's
    maximum on the host to size its output; a scatter into a fixed [experts] tensor does not."""
    flat = chosen.flatten()
    return torch.zeros(experts, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))


def local_experts(x: Tensor, counts: Tensor, layer: MoeFeedForward) -> Tensor:
    """Run every expert on its contiguous slice of `x` (the assignments sorted by expert), on this device."""
    sizes = counts.tolist()  # the slices' lengths: the one host read a dropless dispatch needs per layer
    layer.host_reads += 1
    outs = [layer.experts[str(i)](chunk) for i, chunk in enumerate(x.split(sizes))]
    return torch.cat(outs) if outs else x


def _expert(cfg: MoeConfig) -> nn.Module:
    """One routed expert: llama.py's SwiGLU, or with GPT-OSS's biases and clamped activation (moe_attention.py)."""
    if cfg.expert_bias or cfg.clamped_swiglu:
        return Expert(cfg.base.hidden_size, cfg.expert_ffn, cfg.expert_bias, cfg.clamped_swiglu)
    return FeedForward(dataclasses.replace(cfg.base, ffn_size=cfg.expert_ffn))


class MoeFeedForward(nn.Module):
    """Top-k routed SwiGLU experts (this module's docstring), with shared experts where the shape has them."""

    score_bias: Tensor  # a registered buffer (DeepSeek-V3's routing bias)

    def __init__(self, cfg: MoeConfig, experts: range | None = None, exchange: Exchange = local_experts) -> None:
        super().__init__()
        h, e = cfg.base.hidden_size, cfg.num_experts
        self.cfg, self.exchange, self.balanced = cfg, exchange, False
        self.router = nn.Linear(h, e, bias=cfg.router_bias)
        self.experts = nn.ModuleDict({str(i): _expert(cfg) for i in experts or range(e)})
        if cfg.shared_experts:
            self.shared = FeedForward(dataclasses.replace(cfg.base, ffn_size=cfg.shared_experts * cfg.expert_ffn))
        # DeepSeek-V3's routing bias (routing.py): a buffer, moved outside the gradient by the bias balance
        self.register_buffer("score_bias", torch.zeros(e), persistent=True)
        self.step_counts = torch.zeros(e, dtype=torch.int64)  # the last training forward's assignments
        self.history = RoutingHistory(e)
        self.aux_loss = torch.zeros(())
        # Routing figures, accumulated on the device and never synchronised per step: plain tensors, not buffers,
        # so that DDP does not overwrite them with rank 0's (it broadcasts buffers before each forward).
        self.tokens_per_expert = torch.zeros(e, dtype=torch.int64)
        self.dropped = torch.zeros((), dtype=torch.int64)
        self.assignments = torch.zeros((), dtype=torch.int64)
        self.host_reads = 0  # host reads this layer's dispatch made (module docstring), counted as they happen

    def _route(self, t: Tensor, sequences: int) -> tuple[Tensor, Tensor]:
        """(gate weights [T, k], chosen experts [T, k]) of the tokens (`sequences` sequences of equal length);
        sets the auxiliary loss."""
        cfg = self.cfg
        logits = self.router(t).float()
        if cfg.gating == "softmax":
            scores = probs = logits.softmax(-1)
        else:
            scores = logits.sigmoid()
            probs = scores / scores.sum(-1, keepdim=True)
        if self.balanced:  # forced round robin: reproduces force-balanced figures only (this module's docstring)
            ids = torch.arange(t.shape[0] * cfg.top_k, device=t.device).view(-1, cfg.top_k)
            chosen = ids % cfg.num_experts
        else:
            bias = self.score_bias if cfg.gating == "sigmoid" else None  # the bias steers the choice only
            chosen = choose(scores, bias, cfg.top_k, cfg.groups, cfg.topk_groups)
        weights = scores.gather(1, chosen)
        weights = weights / weights.sum(-1, keepdim=True) * cfg.routed_scale
        if cfg.sequence_aux:
            self.aux_loss = sequence_aux_loss(probs, chosen, sequences, cfg.num_experts)
        else:
            share = expert_counts(chosen, cfg.num_experts).float() / chosen.numel()
            self.aux_loss = cfg.num_experts * (share * probs.mean(0)).sum()
        return weights.to(t.dtype), chosen

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        cfg, k = self.cfg, self.cfg.top_k
        weights, chosen = self._route(t, shape[0] if len(shape) == 3 else 1)
        flat = chosen.flatten()
        if self.tokens_per_expert.device != t.device:  # the counters follow the model to its device
            self.tokens_per_expert, self.dropped, self.assignments = (
                c.to(t.device) for c in (self.tokens_per_expert, self.dropped, self.assignments)
            )
        with torch.no_grad():
            counts = expert_counts(flat, cfg.num_experts)
            self.tokens_per_expert += counts
            self.assignments += flat.numel()
            if self.training:
                self.step_counts = counts
                self.history.add(counts)
        order = flat.argsort(stable=True)
        if cfg.capacity_factor > 0:  # keep each expert's first `capacity` assignments in token order
            capacity = math.floor(cfg.capacity_factor * flat.numel() / cfg.num_experts)
            sorted_experts = flat[order]
            starts = torch.cumsum(counts, 0) - counts
            position = torch.arange(order.numel(), device=t.device) - starts[sorted_experts]
            kept = position < capacity
            order = order[kept]  # a boolean index: the kept count is read on the host
            self.host_reads += 1
            counts = counts.clamp(max=capacity)
            with torch.no_grad():
                self.dropped += (~kept).sum()
        token = order // k
        out = self.exchange(t[token], counts, self)
        y = torch.zeros_like(t).index_add_(0, token, out * weights.flatten()[order, None])
        if cfg.shared_experts:
            y = y + self.shared(t)
        return y.view(shape)


def moe_layers(model: nn.Module) -> list[MoeFeedForward]:
    """The MoE layers of a model (through any wrapper)."""
    return [m for m in model.modules() if isinstance(m, MoeFeedForward)]


def aux_loss(model: nn.Module) -> Tensor:
    """The sum of the layers' auxiliary load-balancing losses of the last forward pass."""
    return torch.stack([m.aux_loss for m in moe_layers(model)]).sum()


def with_bias_balance(model: nn.Module, sync: GradSync) -> GradSync:
    """`sync`, followed by DeepSeek-V3's bias balance (routing.py) where a layer of `model` has one; else `sync`."""
    layers = [m for m in moe_layers(model) if m.cfg.bias_update_rate > 0]
    return BiasBalance(sync, layers) if layers else sync


def set_balanced(model: nn.Module, balanced: bool) -> None:
    """Force round-robin routing (--routing balanced) or let the router choose (the default)."""
    for m in moe_layers(model):
        m.balanced = balanced


def routing_figures(model: nn.Module, group: Any = None) -> dict[str, object]:
    """The routing the point's training steps did (warm-up included), summed over its ranks: per layer the
    assignments each expert received (a histogram: the router's choices, before any drop) and their imbalance
    (max / mean); the dropped share of all assignments; whether routing was forced round robin. One all-reduce
    of the counters where they are (on the GPU: NCCL reduces no CPU tensor) over `group` (the point's process
    group; None: the default, every rank), then one host read, at the end."""
    layers = moe_layers(model)
    if not layers:
        return {}
    counts = torch.stack([m.tokens_per_expert for m in layers])
    totals = torch.stack([torch.stack([m.dropped, m.assignments]) for m in layers]).sum(0)
    windows = torch.stack([m.history.stacked().to(counts.device) for m in layers])  # [layers, windows, experts]
    both = torch.cat([counts.flatten(), totals, windows.flatten()])
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(both, group=group)  # on the counters' device
    host = both.cpu().tolist()
    width = counts.shape[1]
    hist = [host[i * width : (i + 1) * width] for i in range(len(layers))]
    dropped, assigned = (int(v) for v in host[counts.numel() : counts.numel() + 2])
    flat = host[counts.numel() + 2 :]
    n = windows.shape[1]
    per_layer = [[flat[(i * n + w) * width : (i * n + w + 1) * width] for w in range(n)] for i in range(len(layers))]
    imbalance = [max(row) / (sum(row) / len(row)) if sum(row) else float("nan") for row in hist]
    first = layers[0].history
    balance = [m for m in layers if m.cfg.bias_update_rate > 0]
    return {
        "imbalance_over_steps": imbalance_over_steps(per_layer, first.span, first.steps),
        "bias_balance": (
            {
                "rate": balance[0].cfg.bias_update_rate,
                "bias_spread_per_layer": [float(m.score_bias.max() - m.score_bias.min()) for m in balance],
            }
            if balance
            else "off"
        ),
        "tokens_per_expert": hist,
        "imbalance_per_layer": imbalance,
        "imbalance_max": max(imbalance),
        "imbalance_mean": sum(imbalance) / len(imbalance),
        "assignments": assigned,
        "dropped": dropped,
        "dropped_fraction": dropped / assigned if assigned else 0.0,
        "forced_balanced": any(m.balanced for m in layers),
        "read": "accumulated on the device over every training step (warm-up included), read once at the end",
    }


def host_sync_figures(model: nn.Module) -> dict[str, object]:
    """The host reads the MoE layers' dispatch made per training step (counted as they happened, over every
    training forward pass, warm-up included: the same every step), and why each is there."""
    layers = moe_layers(model)
    steps = next((m.forwards for m in model.modules() if isinstance(m, MoeModel)), 0)
    reads = sum(m.host_reads for m in layers)
    capacity = any(m.cfg.capacity_factor > 0 for m in layers)
    return {
        "count": reads / steps if steps else None,
        "why": (
            "the dropless dispatch's slice lengths (split sizes, and on expert-parallel ranks the all-to-all's): "
            "one host read per MoE layer and forward pass (recomputed blocks read again)"
            + ("; with a capacity factor one more per layer (the kept assignments' count)" if capacity else "")
            + "; routing counters stay on the device, read once after timing"
        ),
        "layers": len(layers),
    }


class MoeModel(LlamaModel):
    """The Llama decoder whose MLPs are MoeFeedForwards (the first `dense_layers` one dense SwiGLU each), its
    attention the shape's (moe_attention.py: latent, or GPT-OSS's sink attention): token ids [B, S] -> logits
    [B, S, V]. `experts` (where set) are the global indices this rank holds, `exchange` how their assignments
    reach them. Biases start at zero and sinks at normal(0, 0.02), as Hugging Face's."""

    def __init__(
        self,
        cfg: MoeConfig,
        recompute: bool = False,
        part: Part = WHOLE,
        experts: range | None = None,
        exchange: Exchange = local_experts,
    ) -> None:
        def block(i: int) -> LlamaBlock:
            mlp = FeedForward(cfg.base) if i < cfg.dense_layers else MoeFeedForward(cfg, experts, exchange)
            return LlamaBlock(cfg.base, mlp, attention_for(cfg, i))

        super().__init__(cfg.base, recompute, part, block=block)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.is_meta:
                    continue
                if name.endswith(".bias"):
                    p.zero_()
                elif name.endswith(".sinks"):
                    p.normal_(0.0, cfg.base.initializer_range, generator=_seeded(name))
        self.moe = cfg
        self.sharded_experts = experts is not None and len(experts) < cfg.num_experts  # expert parallel
        self.forwards = 0  # training forward passes: the steps the layers' host reads are counted over

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            self.forwards += 1
        return super().forward(x)


__all__ = [
    "HOST_SYNC_KEY",
    "Exchange",
    "MoeFeedForward",
    "MoeModel",
    "aux_loss",
    "expert_counts",
    "host_sync_figures",
    "local_experts",
    "moe_layers",
    "routing_figures",
    "set_balanced",
    "with_bias_balance",
]
