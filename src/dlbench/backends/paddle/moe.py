"""A mixture-of-experts decoder in PaddlePaddle (#46): the Llama blocks (llama.py) with every MLP a routed MoE layer,
routed as the torch backend's moe.py routes (cases/moe.py's family).

On the batch's tokens flattened to [T, h]: a bias-free router scores every expert; softmax gating takes the top_k
probabilities and renormalises them, sigmoid gating the top_k sigmoid scores over their sum; Switch Transformer's
auxiliary loss ``experts x sum_i f_i P_i`` is kept on the layer for the loss layer to add with the case's weight.
Dispatch: the T x top_k assignments sorted by expert (ties in token order), each expert's SwiGLU run on its slice,
outputs weighted by the gate and summed back per token (``index_add``); dropless by default, or with a capacity
factor each expert keeps the first floor(factor x T x top_k / experts) of its assignments in token order. Shared
experts: one SwiGLU ``shared_experts x expert_ffn`` wide every token visits. The slices' lengths are read on the
host once per layer and forward pass (as torch's dropless dispatch does); the assignments per expert are summed
there too, and a point records them (`routing_figures`).
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn

from dlbench.backends.decoder import capacity_kept, routing_summary
from dlbench.backends.paddle.llama import FeedForward, LlamaModel, linear
from dlbench.cases.arch import MoeConfig


class MoeFeedForward(nn.Layer):
    """Top-k routed SwiGLU experts, with shared experts where the shape has them."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__()
        h, e = cfg.base.hidden_size, cfg.num_experts
        self.cfg = cfg
        self.router = linear(cfg.base, h, e)
        self.experts = nn.LayerList([FeedForward(cfg.base, cfg.expert_ffn) for _ in range(e)])
        self.shared = FeedForward(cfg.base, cfg.shared_experts * cfg.expert_ffn) if cfg.shared_experts else None
        self.aux_loss = paddle.zeros([])
        self.tokens_per_expert = [0] * e  # assignments each expert received, summed on the host (module docstring)
        self.dropped = 0
        self.assignments = 0

    def _route(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """(gate weights [T, k], chosen experts [T, k]) of the tokens; sets the auxiliary loss."""
        cfg = self.cfg
        logits = self.router(t).astype("float32")
        if cfg.gating == "softmax":
            scores = probs = F.softmax(logits, axis=-1)
        else:
            scores = F.sigmoid(logits)
            probs = scores / scores.sum(-1, keepdim=True)
        weights, chosen = paddle.topk(scores, cfg.top_k, axis=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        share = F.one_hot(chosen.flatten(), cfg.num_experts).sum(0) / float(chosen.shape[0] * cfg.top_k)
        self.aux_loss = cfg.num_experts * (share * probs.mean(0)).sum()
        return weights.astype(t.dtype), chosen

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        t = x.reshape([-1, shape[-1]])
        cfg, k = self.cfg, self.cfg.top_k
        weights, chosen = self._route(t)
        flat = chosen.flatten()
        n = int(flat.shape[0])
        order = paddle.argsort(flat * n + paddle.arange(n, dtype=flat.dtype))  # by expert, ties in token order
        counts = [int(c) for c in paddle.bincount(flat, minlength=cfg.num_experts).numpy()]  # the one host read
        self.tokens_per_expert = [a + c for a, c in zip(self.tokens_per_expert, counts, strict=True)]
        self.assignments += n
        if cfg.capacity_factor > 0:  # each expert keeps its first `capacity` assignments in token order
            slices = capacity_kept(counts, cfg.capacity_factor, cfg.num_experts)
            counts = [kept for _, kept in slices]
            self.dropped += n - sum(counts)
            keep = [paddle.arange(start, start + kept) for start, kept in slices]
            order = paddle.gather(order, paddle.concat(keep)) if sum(counts) else order[:0]
        token = order // k
        inputs = paddle.gather(t, token)
        outs = [self.experts[i](chunk) for i, chunk in enumerate(paddle.split(inputs, counts)) if counts[i]]
        gate = paddle.gather(weights.flatten(), order)[:, None]
        y = paddle.zeros_like(t)
        if outs:
            y = paddle.index_add(y, token, 0, paddle.concat(outs) * gate)
        if self.shared is not None:
            y = y + self.shared(t)
        return y.reshape(shape)


class MoeModel(LlamaModel):
    """The Llama decoder whose every MLP is a MoeFeedForward: token ids [B, S] -> logits [B, S, V]."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__(cfg.base, feed_forward=lambda: MoeFeedForward(cfg))
        self.moe = cfg

    def moe_layers(self) -> list[MoeFeedForward]:
        """The model's MoE layers."""
        return [m for m in self.sublayers() if isinstance(m, MoeFeedForward)]

    def aux_loss(self) -> Tensor:
        """The sum of the layers' auxiliary load-balancing losses of the last forward pass."""
        return paddle.add_n([m.aux_loss for m in self.moe_layers()])

    def routing_figures(self) -> dict[str, object]:
        """The routing the point's training steps did (warm-up included): per layer the assignments each expert
        received, their imbalance (max / mean), the dropped share."""
        layers = self.moe_layers()
        hist = [m.tokens_per_expert for m in layers]
        return routing_summary(hist, sum(m.assignments for m in layers), sum(m.dropped for m in layers))


__all__ = ["MoeFeedForward", "MoeModel"]
