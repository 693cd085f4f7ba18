"""A mixture-of-experts decoder on a torch-shaped framework's ``nn`` (OneFlow's, #46): llama.py's blocks with every
MLP a routed MoE layer, routed as the torch backend's moe.py routes Mixtral's shapes (cases/moe.py), with its
module names (``feed_forward.router``, ``feed_forward.experts.<i>.w1`` ..., ``feed_forward.shared``).

On the batch's tokens flattened to [T, h]: a bias-free router scores every expert; softmax gating takes the top_k
probabilities and renormalises them, sigmoid gating the top_k sigmoid scores over their sum; Switch Transformer's
auxiliary loss ``experts x sum_i f_i P_i`` is kept on the layer for the loss to add with the case's weight.
Dispatch: the T x top_k assignments sorted by expert (ties in token order), each expert's SwiGLU run on its slice,
outputs weighted by the gate, put back in the assignments' order and summed per token (a gather: OneFlow's
``index_add`` has no gradient); dropless by default, or with a capacity
factor each expert keeps the first floor(factor x T x top_k / experts) of its assignments in token order
(`decoder.capacity_kept`). Shared experts: one SwiGLU ``shared_experts x expert_ffn`` wide every token visits. The
slices' lengths are read on the host once per layer and forward pass (as torch's dropless dispatch does); the
assignments per expert are summed there too, and a point records them (`decoder.routing_summary`).
"""

from __future__ import annotations

from typing import Any

from dlbench.backends.decoder import capacity_kept, routing_summary
from dlbench.backends.torchlike.llama import LlamaParts, init_parameters
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases.arch import MoeConfig


def define(ops: TorchOps, llama: LlamaParts) -> type:
    """The MoE decoder on `ops`'s framework, from the framework's Llama modules."""
    lib, nn, F = ops.lib, ops.nn, ops.F
    Module: Any = nn.Module
    FeedForward, Linear = llama.feed_forward, llama.linear
    Llama: Any = llama.model

    class MoeFeedForward(Module):
        """Top-k routed SwiGLU experts, with shared experts where the shape has them."""

        def __init__(self, cfg: MoeConfig) -> None:
            super().__init__()
            h, e = cfg.base.hidden_size, cfg.num_experts
            self.cfg = cfg
            self.router = Linear(h, e)
            self.experts = nn.ModuleList([FeedForward(cfg.base, cfg.expert_ffn) for _ in range(e)])
            self.shared = FeedForward(cfg.base, cfg.shared_experts * cfg.expert_ffn) if cfg.shared_experts else None
            # torch's routing bias (DeepSeek-V3's balance moves it; Mixtral's shapes leave it at zero), so that the
            # state dicts are the same
            self.register_buffer("score_bias", lib.zeros(e))
            self.aux_loss: Any = None
            self.tokens_per_expert = [0] * e  # assignments each expert received, summed on the host
            self.dropped = 0
            self.assignments = 0

        def _route(self, t: Any) -> tuple[Any, Any]:
            """(gate weights [T, k], chosen experts [T, k]) of the tokens; sets the auxiliary loss."""
            cfg = self.cfg
            logits = self.router(t)
            logits = logits if logits.dtype == lib.float64 else logits.float()
            if cfg.gating == "softmax":
                scores = probs = F.softmax(logits, dim=-1)
            else:
                scores = lib.sigmoid(logits)
                probs = scores / scores.sum(-1, keepdim=True)
            choice = scores + self.score_bias.to(scores.dtype) if cfg.gating == "sigmoid" else scores
            chosen = lib.topk(choice, cfg.top_k, dim=-1)[1]  # the bias steers the choice only, as torch's
            weights = lib.gather(scores, 1, chosen)
            weights = weights / weights.sum(-1, keepdim=True)
            share = F.one_hot(chosen.flatten(), cfg.num_experts).sum(0).to(probs.dtype) / float(chosen.numel())
            self.aux_loss = cfg.num_experts * (share * probs.mean(0)).sum()
            return weights.to(t.dtype), chosen

        def forward(self, x: Any) -> Any:
            shape = x.shape
            t = x.reshape(-1, shape[-1])
            cfg = self.cfg
            weights, chosen = self._route(t)
            flat = chosen.flatten()
            n = flat.shape[0]
            order = lib.argsort(flat * n + lib.arange(n, device=flat.device))  # by expert, ties in token order
            counts = [int(c) for c in lib.bincount(flat, minlength=cfg.num_experts).numpy()]  # the one host read
            self.tokens_per_expert = [a + c for a, c in zip(self.tokens_per_expert, counts, strict=True)]
            self.assignments += n
            if cfg.capacity_factor > 0:  # each expert keeps its first `capacity` assignments in token order
                slices = capacity_kept(counts, cfg.capacity_factor, cfg.num_experts)
                counts = [kept for _, kept in slices]
                self.dropped += n - sum(counts)
                keep = [lib.arange(start, start + kept, device=flat.device) for start, kept in slices]
                order = order[lib.cat(keep)]
            kept = order.shape[0]
            outs = [
                self.experts[i](part) for i, part in enumerate(lib.split(t[order // cfg.top_k], counts)) if counts[i]
            ]
            # back to the assignments' order (a dropped one reads the zero row), summed over each token's top_k:
            # OneFlow's index_add has no gradient, its gather has
            gated = lib.cat([*outs, lib.zeros(1, t.shape[-1], dtype=t.dtype, device=t.device)])
            gated = gated * lib.cat([weights.flatten()[order], lib.zeros(1, dtype=t.dtype, device=t.device)])[:, None]
            position = lib.full((n,), kept, dtype=order.dtype, device=order.device)
            position[order] = lib.arange(kept, dtype=order.dtype, device=order.device)
            y = gated[position].view(-1, cfg.top_k, t.shape[-1]).sum(1)
            if self.shared is not None:
                y = y + self.shared(t)
            return y.reshape(shape)

    class MoeModel(Llama):
        """The Llama decoder whose every MLP is a MoeFeedForward: token ids [B, S] -> logits [B, S, V]."""

        def __init__(self, cfg: MoeConfig, init: bool = True) -> None:
            super().__init__(cfg.base, feed_forward=lambda: MoeFeedForward(cfg), init=False)
            self.moe = cfg
            if init:
                init_parameters(ops, cfg.base, self)

        def moe_layers(self) -> list[Any]:
            """The model's MoE layers."""
            return [m for m in self.modules() if isinstance(m, MoeFeedForward)]

        def aux_loss(self) -> Any:
            """The sum of the layers' auxiliary load-balancing losses of the last forward pass."""
            losses = [m.aux_loss for m in self.moe_layers()]
            return sum(losses[1:], losses[0])

        def routing_figures(self) -> dict[str, object]:
            """The routing the point's training steps did (`decoder.routing_summary`)."""
            layers = self.moe_layers()
            hist = [m.tokens_per_expert for m in layers]
            return routing_summary(hist, sum(m.assignments for m in layers), sum(m.dropped for m in layers))

    return MoeModel


__all__ = ["define"]
