"""A Llama-3-style decoder in PaddlePaddle (#46), laid out like the torch backend's llama.py.

Pre-norm blocks: RMSNorm (written out: paddle's fused ``rms_norm`` has no CPU kernel); grouped-query attention with
rotary positions (rotate-half form, base ``rope_theta``) through ``paddle.nn.functional.scaled_dot_product_attention``
(``is_causal=True``; each key/value head repeated over its group of query heads first); a SwiGLU MLP
``w2(silu(w1 x) * w3 x)``; no biases, no dropout; a final RMSNorm and the LM head, tied to the token embedding
(its transpose) or not. Trainable parameters: exactly ``dlbench.cases.llama.param_count`` (paddle's Linear weight
is [in, out], the same count). Init as torch's: every matrix normal(0, 0.02), the residual output projections
(``wo``, ``w2``) / sqrt(2 x layers), norms 1. `feed_forward` makes each block's MLP where it is not SwiGLU (moe.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn

from dlbench.cases.arch import LlamaConfig

ParallelLinear = Callable[[int, int, bool], nn.Layer]  # (in, out, split the output?) -> a linear layer


def _normal(std: float) -> paddle.ParamAttr:
    return paddle.ParamAttr(initializer=nn.initializer.Normal(0.0, std))


def linear(cfg: LlamaConfig, fan_in: int, fan_out: int, residual: bool = False) -> nn.Linear:
    """A bias-free Linear with the family's init (the residual outputs scaled by 1 / sqrt(2 x layers))."""
    std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if residual else 1.0)
    return nn.Linear(fan_in, fan_out, weight_attr=_normal(std), bias_attr=False)


class RMSNorm(nn.Layer):
    """x / sqrt(mean(x^2) + eps) x weight, computed in float32."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([width], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x: Tensor) -> Tensor:
        h = x.astype("float32")
        h = h * paddle.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * self.weight.astype("float32")).astype(x.dtype)


def rope(x: Tensor, theta: float) -> Tensor:
    """Rotate [B, S, heads, d] by position x theta^(-2i/d) (channel i pairs with channel i + d/2)."""
    s, d = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (paddle.arange(0, d, 2, dtype="float32") / d)
    angles = paddle.outer(paddle.arange(s, dtype="float32"), inv)
    both = paddle.concat([angles, angles], axis=-1)
    cos, sin = both.cos()[None, :, None, :], both.sin()[None, :, None, :]
    first, second = x.chunk(2, axis=-1)
    turned = paddle.concat([-second, first], axis=-1)
    return (x.astype("float32") * cos + turned.astype("float32") * sin).astype(x.dtype)


class Attention(nn.Layer):
    """Causal grouped-query self-attention with rotary positions; its heads read from its projections' widths,
    so a tensor-parallel rank's share of the heads runs unchanged (`make` builds its linears: fleet's where split)."""

    def __init__(self, cfg: LlamaConfig, make: ParallelLinear | None = None) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.head_dim, self.theta, self.group = d, cfg.rope_theta, cfg.num_heads // cfg.num_kv_heads
        if make is None:
            self.wq, self.wk = linear(cfg, h, cfg.num_heads * d), linear(cfg, h, cfg.num_kv_heads * d)
            self.wv, self.wo = linear(cfg, h, cfg.num_kv_heads * d), linear(cfg, cfg.num_heads * d, h, residual=True)
        else:
            self.wq, self.wk = make(h, cfg.num_heads * d, True), make(h, cfg.num_kv_heads * d, True)
            self.wv, self.wo = make(h, cfg.num_kv_heads * d, True), make(cfg.num_heads * d, h, False)

    def forward(self, x: Tensor) -> Tensor:
        b, s = x.shape[0], x.shape[1]
        d = self.head_dim
        q = rope(self.wq(x).reshape([b, s, -1, d]), self.theta)
        k = rope(self.wk(x).reshape([b, s, -1, d]), self.theta)
        v = self.wv(x).reshape([b, s, -1, d])
        if self.group > 1:  # each key/value head serves its group of query heads
            k, v = (t.repeat_interleave(self.group, axis=2) for t in (k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, S, heads, d]
        return self.wo(y.reshape([b, s, -1]))


class FeedForward(nn.Layer):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig, width: int | None = None, make: ParallelLinear | None = None) -> None:
        super().__init__()
        h, f = cfg.hidden_size, width or cfg.ffn_size
        if make is None:
            self.w1, self.w2, self.w3 = linear(cfg, h, f), linear(cfg, f, h, residual=True), linear(cfg, h, f)
        else:
            self.w1, self.w2, self.w3 = make(h, f, True), make(f, h, False), make(h, f, True)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Layer):
    """x + attention(RMSNorm(x)), then x + MLP(RMSNorm(x))."""

    def __init__(self, cfg: LlamaConfig, feed_forward: nn.Layer | None = None, make: ParallelLinear | None = None):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.attention = Attention(cfg, make)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.feed_forward = feed_forward if feed_forward is not None else FeedForward(cfg, make=make)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class LlamaModel(nn.Layer):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits [B, S, V].
    `feed_forward`, where set, makes each block's MLP (moe.py's experts); `make` builds the blocks' linears
    (fleet's column- and row-parallel layers in a tensor-parallel job, distributed.py)."""

    def __init__(
        self,
        cfg: LlamaConfig,
        feed_forward: Callable[[], nn.Layer] | None = None,
        make: ParallelLinear | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size, weight_attr=_normal(cfg.initializer_range))
        self.blocks = nn.LayerList(
            [LlamaBlock(cfg, feed_forward() if feed_forward else None, make) for _ in range(cfg.num_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = None if cfg.tied_embeddings else linear(cfg, cfg.hidden_size, cfg.vocab_size)

    def forward(self, input_ids: Tensor) -> Tensor:
        x = self.wte(input_ids)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if self.lm_head is None:  # tied: the embedding's transpose is the head
            return paddle.matmul(x, self.wte.weight, transpose_y=True)
        return self.lm_head(x)


__all__ = ["Attention", "FeedForward", "LlamaBlock", "LlamaModel", "RMSNorm", "linear", "rope"]
