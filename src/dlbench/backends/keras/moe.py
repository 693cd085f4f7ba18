"""A mixture-of-experts decoder in Keras 3 (#46): the Llama blocks (llama.py) with every MLP a routed MoE layer,
routed as the torch backend's moe.py routes (cases/moe.py's family), in keras.ops only.

On the batch's tokens flattened to [T, h]: a bias-free router scores every expert; softmax gating takes the top_k
probabilities and renormalises them, sigmoid gating the top_k sigmoid scores over their sum; Switch Transformer's
auxiliary loss ``experts x sum_i f_i P_i`` is the layer's second output, which the loss adds with the case's weight.
With a capacity factor each expert keeps the first floor(factor x T x top_k / experts) of its assignments in token
order (dropless by default). Shared experts: one SwiGLU ``shared_experts x expert_ffn`` wide every token visits.

Dispatch is dense (DISPATCH): every expert runs on every token and its output is weighted by the token's gate for
it, 0 where the router did not choose it. The result equals torch's sorted dropless dispatch, with static shapes
(one traced graph under tf.function, XLA or jax.jit, no host read), at experts / top_k times the routed experts'
FLOPs; the point's FLOPs and MFU still count the routed work only (the family's convention). The assignments each
expert received are summed in the layer's non-trainable variables, which a point's routing figures read.
"""

from __future__ import annotations

import math
from typing import Any

from keras import layers, ops

from dlbench.backends.decoder import routing_summary
from dlbench.backends.keras.llama import FeedForward, LlamaModel, linear
from dlbench.cases.arch import MoeConfig

Tensor = Any
DISPATCH = (
    "dense: every expert computes every token, weighted by its gate (0 where not chosen); equals the dropless "
    "sorted dispatch at experts/top_k x the routed FLOPs (MFU counts the routed FLOPs only)"
)


class MoeFeedForward(layers.Layer):
    """Top-k routed SwiGLU experts, with shared experts where the shape has them: [B, S, h] -> ([B, S, h], aux)."""

    def __init__(self, cfg: MoeConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        h, e = cfg.base.hidden_size, cfg.num_experts
        self.cfg = cfg
        self.router = linear(cfg.base, h, e, name="router")
        self.experts = [FeedForward(cfg.base, cfg.expert_ffn, name=f"experts_{i}") for i in range(e)]
        width = cfg.shared_experts * cfg.expert_ffn
        self.shared = FeedForward(cfg.base, width, name="shared") if cfg.shared_experts else None
        # The routing the steps did, summed on the device (float32: exact to 2^24 assignments per expert).
        self.tokens = self.add_weight(shape=(e,), initializer="zeros", trainable=False, dtype="float32", name="tokens")
        self.dropped = self.add_weight(shape=(), initializer="zeros", trainable=False, dtype="float32", name="dropped")
        self.built = True

    def _route(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """(gates [T, E]: each token's weight for each expert, 0 where not chosen or dropped; the auxiliary loss)."""
        cfg, e, k = self.cfg, self.cfg.num_experts, self.cfg.top_k
        logits = ops.cast(self.router(t), "float32")
        if cfg.gating == "softmax":
            scores = probs = ops.softmax(logits, axis=-1)
        else:
            scores = ops.sigmoid(logits)
            probs = scores / ops.sum(scores, axis=-1, keepdims=True)
        weights, chosen = ops.top_k(scores, k)
        weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        picked = ops.one_hot(ops.reshape(chosen, (-1,)), e)  # [T x k, E], token-major: ties in token order
        n = picked.shape[0]  # static: T x k
        counts = ops.sum(picked, axis=0)
        aux = e * ops.sum(counts / ops.sum(counts) * ops.mean(probs, axis=0))
        self.tokens.assign_add(counts)
        if cfg.capacity_factor > 0:  # each expert keeps its first `capacity` assignments in token order
            capacity = math.floor(cfg.capacity_factor * n / e)
            place = ops.cumsum(picked, axis=0) * picked  # 1-based place of each assignment in its expert's queue
            picked = picked * ops.cast(place <= capacity, "float32")
            self.dropped.assign_add(float(n) - ops.sum(picked))
        gates = ops.reshape(ops.reshape(weights, (-1, 1)) * picked, (-1, k, e))
        return ops.sum(gates, axis=1), aux

    def call(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The experts' gated outputs, plus the shared experts', and the auxiliary loss."""
        h = x.shape[-1]
        t = ops.reshape(x, (-1, h))
        gates, aux = self._route(t)
        gates = ops.cast(gates, t.dtype)
        y = ops.zeros_like(t)
        for i, expert in enumerate(self.experts):
            y = y + expert(t) * gates[:, i : i + 1]
        if self.shared is not None:
            y = y + self.shared(t)
        return ops.reshape(y, ops.shape(x)), aux


class MoeModel(LlamaModel):
    """The Llama decoder whose every MLP is a MoeFeedForward: token ids [B, S] -> (logits [B, S, V], the layers'
    summed auxiliary loss)."""

    def __init__(self, cfg: MoeConfig, **kwargs: Any) -> None:
        super().__init__(cfg.base, feed_forward=lambda i: MoeFeedForward(cfg, name="moe"), **kwargs)
        self.moe = cfg

    def moe_layers(self) -> list[MoeFeedForward]:
        """The model's MoE layers."""
        return [b.feed_forward for b in self.blocks if isinstance(b.feed_forward, MoeFeedForward)]

    def routing_figures(self) -> dict[str, object]:
        """The routing the point's training steps did (warm-up included): per layer the assignments each expert
        received, their imbalance (max / mean), the dropped share."""
        hist = [[round(float(c)) for c in ops.convert_to_numpy(m.tokens)] for m in self.moe_layers()]
        dropped = sum(round(float(ops.convert_to_numpy(m.dropped))) for m in self.moe_layers())
        read = "summed on the device in each MoE layer's non-trainable counters, warm-up included"
        return {**routing_summary(hist, sum(sum(r) for r in hist), dropped), "read": read}


__all__ = ["DISPATCH", "MoeFeedForward", "MoeModel"]
