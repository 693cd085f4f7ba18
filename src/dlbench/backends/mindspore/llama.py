"""A Llama-3-style decoder in MindSpore (#46), laid out like the torch and Paddle backends' llama.py.

Pre-norm blocks: RMSNorm (written out, in float32); grouped-query attention with rotary positions (rotate-half
form, base ``rope_theta``), each key/value head repeated over its group of query heads, scores masked causally and
softmaxed as ``scaled_dot_product_attention(is_causal=True)`` does (MindSpore's fused attention runs on Ascend
only); a SwiGLU MLP ``w2(silu(w1 x) * w3 x)``; no biases, no dropout; a final RMSNorm and the LM head, tied to the
token embedding (its transpose) or not. A Dense weight is [out, in], as torch's. Trainable parameters: exactly
``dlbench.cases.llama.param_count``. Init as torch's: every matrix normal(0, 0.02), the residual output projections
(``wo``, ``w2``) / sqrt(2 x layers), norms 1. ``feed_forward`` makes each block's MLP where it is not SwiGLU
(moe.py). Everything is graph-friendly (ms.jit): shapes come from the input, the mask from two aranges.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import Normal, initializer

from dlbench.cases.arch import LlamaConfig


def linear(cfg: LlamaConfig, fan_in: int, fan_out: int, residual: bool = False) -> nn.Dense:
    """A bias-free Dense with the family's init (the residual outputs scaled by 1 / sqrt(2 x layers))."""
    std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if residual else 1.0)
    return nn.Dense(fan_in, fan_out, weight_init=Normal(std), has_bias=False)


class RMSNorm(nn.Cell):
    """x / sqrt(mean(x^2) + eps) x weight, computed in float32."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = Parameter(initializer("ones", [width], ms.float32), name="weight")

    def construct(self, x: Tensor) -> Tensor:
        h = x.astype(ms.float32)
        h = h * ops.rsqrt((h * h).mean(-1, keep_dims=True) + self.eps)
        return (h * self.weight).astype(x.dtype)


def rope(x: Tensor, theta: float) -> Tensor:
    """Rotate [B, S, heads, d] by position x theta^(-2i/d) (channel i pairs with channel i + d/2)."""
    s, d = x.shape[1], x.shape[-1]
    inv = 1.0 / ops.pow(theta, ops.arange(0, d, 2, dtype=ms.float32) / d)
    angles = ops.outer(ops.arange(s, dtype=ms.float32), inv)
    both = ops.cat([angles, angles], -1)
    cos, sin = ops.cos(both).reshape(1, s, 1, d), ops.sin(both).reshape(1, s, 1, d)
    half = d // 2
    turned = ops.cat([-x[..., half:], x[..., :half]], -1)
    return (x.astype(ms.float32) * cos + turned.astype(ms.float32) * sin).astype(x.dtype)


def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(d), future keys masked) v on [B, S, heads, d] (heads of k and v already repeated)."""
    s, d = q.shape[1], q.shape[-1]
    q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    scores = ops.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(d)
    future = ops.arange(s).reshape(s, 1) < ops.arange(s).reshape(1, s)
    scores = ops.masked_fill(scores, future, float("-inf"))
    return ops.matmul(ops.softmax(scores, -1), v).transpose(0, 2, 1, 3)


class Attention(nn.Cell):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.head_dim, self.theta, self.group = d, cfg.rope_theta, cfg.num_heads // cfg.num_kv_heads
        self.wq, self.wk = linear(cfg, h, cfg.num_heads * d), linear(cfg, h, cfg.num_kv_heads * d)
        self.wv, self.wo = linear(cfg, h, cfg.num_kv_heads * d), linear(cfg, cfg.num_heads * d, h, residual=True)

    def construct(self, x: Tensor) -> Tensor:
        b, s, d = x.shape[0], x.shape[1], self.head_dim
        q = rope(self.wq(x).reshape(b, s, -1, d), self.theta)
        k = rope(self.wk(x).reshape(b, s, -1, d), self.theta)
        v = self.wv(x).reshape(b, s, -1, d)
        if self.group > 1:  # each key/value head serves its group of query heads
            k, v = ops.repeat_interleave(k, self.group, 2), ops.repeat_interleave(v, self.group, 2)
        return self.wo(causal_attention(q, k, v).reshape(b, s, -1))


class FeedForward(nn.Cell):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig, width: int | None = None) -> None:
        super().__init__()
        h, f = cfg.hidden_size, width or cfg.ffn_size
        self.w1, self.w2, self.w3 = linear(cfg, h, f), linear(cfg, f, h, residual=True), linear(cfg, h, f)

    def construct(self, x: Tensor) -> Tensor:
        return self.w2(ops.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Cell):
    """x + attention(RMSNorm(x)), then x + MLP(RMSNorm(x))."""

    def __init__(self, cfg: LlamaConfig, feed_forward: nn.Cell | None = None) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.feed_forward = feed_forward if feed_forward is not None else FeedForward(cfg)

    def construct(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class LlamaModel(nn.Cell):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits [B, S, V].
    `feed_forward`, where set, makes each block's MLP (moe.py's experts)."""

    def __init__(self, cfg: LlamaConfig, feed_forward: Callable[[], nn.Cell] | None = None) -> None:
        super().__init__()
        self.tied = cfg.tied_embeddings
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size, embedding_table=Normal(cfg.initializer_range))
        self.blocks = nn.CellList(
            [LlamaBlock(cfg, feed_forward() if feed_forward else None) for _ in range(cfg.num_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = None if self.tied else linear(cfg, cfg.hidden_size, cfg.vocab_size)

    def construct(self, input_ids: Tensor) -> Tensor:
        x = self.wte(input_ids)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if self.lm_head is None:  # tied: the embedding's transpose is the head
            return ops.matmul(x, self.wte.embedding_table.T)
        return self.lm_head(x)


__all__ = ["Attention", "FeedForward", "LlamaBlock", "LlamaModel", "RMSNorm", "causal_attention", "linear", "rope"]
