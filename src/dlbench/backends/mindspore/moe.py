"""A mixture-of-experts decoder in MindSpore (#46): the Llama blocks (llama.py) with every MLP a routed MoE layer,
routed as the torch and Paddle backends' moe.py route (cases/moe.py's family), and the causal-LM loss of both.

On the batch's tokens flattened to [T, h]: a bias-free router scores every expert; softmax gating takes the top_k
probabilities and renormalises them, sigmoid gating the top_k sigmoid scores over their sum; Switch Transformer's
auxiliary loss ``experts x sum_i f_i P_i`` is kept on the layer for the loss Cell to add with the case's weight.
Dispatch: the T x top_k assignments sorted by expert (ties in token order), each expert's SwiGLU run on its slice,
outputs weighted by the gate and summed back per token (``unsorted_segment_sum``); dropless by default, or with a
capacity factor each expert keeps the first floor(factor x T x top_k / experts) of its assignments in token order.
Shared experts: one SwiGLU ``shared_experts x expert_ffn`` wide every token visits. The chosen experts are read on
the host once per layer and forward pass (as torch's dropless dispatch reads its slices' lengths), which PyNative
allows and an ms.jit graph does not: a MoE trains op by op (backend.py refuses --compile). The assignments per
expert are summed there too, and a point records them (`routing_figures`).
"""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from dlbench.backends.decoder import routing_summary
from dlbench.backends.mindspore.llama import FeedForward, LlamaModel, linear
from dlbench.cases.arch import MoeConfig


class MoeFeedForward(nn.Cell):
    """Top-k routed SwiGLU experts, with shared experts where the shape has them."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__()
        h, e = cfg.base.hidden_size, cfg.num_experts
        self.cfg = cfg
        self.router = linear(cfg.base, h, e)
        self.experts = nn.CellList([FeedForward(cfg.base, cfg.expert_ffn) for _ in range(e)])
        self.shared = FeedForward(cfg.base, cfg.shared_experts * cfg.expert_ffn) if cfg.shared_experts else None
        self.aux_loss = ops.zeros((), ms.float32)
        self.tokens_per_expert = [0] * e  # assignments each expert received, summed on the host (module docstring)
        self.dropped = 0
        self.assignments = 0

    def _route(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """(gate weights [T, k], chosen experts [T, k]) of the tokens; sets the auxiliary loss."""
        cfg = self.cfg
        logits = self.router(t).astype(ms.float32)
        if cfg.gating == "softmax":
            scores = probs = ops.softmax(logits, -1)
        else:
            scores = ops.sigmoid(logits)
            probs = scores / scores.sum(-1, keepdims=True)
        weights, chosen = ops.topk(scores, cfg.top_k, -1)
        weights = weights / weights.sum(-1, keepdims=True)
        picked = ops.one_hot(chosen.reshape(-1), cfg.num_experts).astype(ms.float32)
        share = picked.sum(0) / float(chosen.shape[0] * cfg.top_k)
        self.aux_loss = cfg.num_experts * (share * probs.mean(0)).sum()
        return weights.astype(t.dtype), chosen

    def _plan(self, chosen: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """The assignments in dispatch order (by expert, ties in token order; a capacity keeps each expert's first)
        and each expert's count; records the routing."""
        cfg, flat = self.cfg, chosen.reshape(-1)
        order = np.argsort(flat, kind="stable")
        counts = np.bincount(flat, minlength=cfg.num_experts).tolist()
        self.tokens_per_expert = [a + c for a, c in zip(self.tokens_per_expert, counts, strict=True)]
        self.assignments += len(flat)
        if cfg.capacity_factor > 0:  # each expert keeps its first `capacity` assignments in token order
            capacity = math.floor(cfg.capacity_factor * len(flat) / cfg.num_experts)
            starts = np.cumsum([0, *counts[:-1]])
            keep = [np.arange(s, s + min(c, capacity)) for s, c in zip(starts, counts, strict=True)]
            kept = [min(c, capacity) for c in counts]
            self.dropped += len(flat) - sum(kept)
            order, counts = order[np.concatenate(keep).astype(np.int64)], kept
        return order, counts

    def construct(self, x: Tensor) -> Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        weights, chosen = self._route(t)
        order, counts = self._plan(chosen.asnumpy())  # the one host read
        y = ops.zeros_like(t)
        if sum(counts):
            token = Tensor(order // self.cfg.top_k, ms.int32)
            inputs = ops.gather(t, token, 0)
            chunks = ops.split(inputs, counts, 0)
            outs = [self.experts[i](chunk) for i, chunk in enumerate(chunks) if counts[i]]
            gate = ops.gather(weights.reshape(-1), Tensor(order, ms.int32), 0).reshape(-1, 1)
            y = ops.unsorted_segment_sum(ops.cat(outs, 0) * gate, token, t.shape[0])
        if self.shared is not None:
            y = y + self.shared(t)
        return y.reshape(shape)


class MoeModel(LlamaModel):
    """The Llama decoder whose every MLP is a MoeFeedForward: token ids [B, S] -> logits [B, S, V]."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__(cfg.base, feed_forward=lambda: MoeFeedForward(cfg))

    def moe_layers(self) -> list[MoeFeedForward]:
        """The model's MoE layers."""
        return [c for _, c in self.cells_and_names() if isinstance(c, MoeFeedForward)]

    def aux_loss(self) -> Tensor:
        """The sum of the layers' auxiliary load-balancing losses of the last forward pass."""
        return ops.stack([m.aux_loss for m in self.moe_layers()]).sum()

    def routing_figures(self) -> dict[str, object]:
        """The routing the point's training steps did (warm-up included): per layer the assignments each expert
        received, their imbalance (max / mean), the dropped share."""
        layers = self.moe_layers()
        hist = [m.tokens_per_expert for m in layers]
        return routing_summary(hist, sum(m.assignments for m in layers), sum(m.dropped for m in layers))


class CausalLmLoss(nn.Cell):
    """A decoder plus its loss: the mean next-token cross-entropy over every position, and for a mixture of
    experts the case's weight x the layers' auxiliary load-balancing loss; takes (input_ids, labels)."""

    def __init__(self, model: nn.Cell, aux_weight: float) -> None:
        super().__init__()
        self.model = model
        self.aux_weight = aux_weight if isinstance(model, MoeModel) else 0.0

    def construct(self, input_ids: Tensor, labels: Tensor) -> Tensor:
        logits = self.model(input_ids)
        loss = ops.cross_entropy(logits.reshape(-1, logits.shape[-1]).astype(ms.float32), labels.reshape(-1))
        if self.aux_weight:
            loss = loss + self.aux_weight * self.model.aux_loss()
        return loss


__all__ = ["CausalLmLoss", "MoeFeedForward", "MoeModel"]
