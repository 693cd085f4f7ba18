"""A Llama-3-style decoder in Jittor (#46), laid out like the torch backend's llama.py (and paddle's).

Pre-norm blocks: RMSNorm (written out: Jittor has none); grouped-query attention with rotary positions
(rotate-half form, base ``rope_theta``) and a causal softmax written out (Jittor 1.3 has no scaled-dot-product
attention), each key/value head repeated over its group of query heads; a SwiGLU MLP ``w2(silu(w1 x) * w3 x)``; no
biases, no dropout; a final RMSNorm and the LM head, tied to the token embedding or not. The state_dict names and
layouts are torch's (Linear [out, in]). Init as torch's: every matrix normal(0, 0.02), the residual output
projections (``wo``, ``w2``) / sqrt(2 x layers), norms 1. `param_count` counts a member from one block's
parameters, so that llama3_8b is counted without building 8 billion weights.
"""

from __future__ import annotations

import math

import jittor as jt
import numpy as np
from jittor import nn

from dlbench.cases.arch import LlamaConfig


def linear(cfg: LlamaConfig, fan_in: int, fan_out: int, residual: bool = False) -> nn.Linear:
    """A bias-free Linear with the family's init (the residual outputs scaled by 1 / sqrt(2 x layers))."""
    layer = nn.Linear(fan_in, fan_out, bias=False)
    std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if residual else 1.0)
    layer.weight = jt.init.gauss((fan_out, fan_in), "float32", 0.0, std)
    return layer


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) x weight."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = jt.ones(width)

    def execute(self, x: jt.Var) -> jt.Var:
        return x * jt.rsqrt((x * x).mean(-1, keepdims=True) + self.eps) * self.weight


def _rope_tables(seq: int, d: int, theta: float) -> tuple[jt.Var, jt.Var]:
    """cos and sin of the rotary angles, [1, seq, 1, d]: position x theta^(-2i/d), each frequency twice."""
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv)
    both = np.concatenate([angles, angles], axis=-1)[None, :, None, :]
    return jt.array(np.cos(both).astype(np.float32)), jt.array(np.sin(both).astype(np.float32))


def rope(x: jt.Var, cos: jt.Var, sin: jt.Var) -> jt.Var:
    """Rotate [B, S, heads, d] (channel i pairs with channel i + d/2)."""
    half = x.shape[-1] // 2
    turned = jt.concat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.head_dim, self.theta, self.group = d, cfg.rope_theta, cfg.num_heads // cfg.num_kv_heads
        self.wq, self.wk = linear(cfg, h, cfg.num_heads * d), linear(cfg, h, cfg.num_kv_heads * d)
        self.wv, self.wo = linear(cfg, h, cfg.num_kv_heads * d), linear(cfg, cfg.num_heads * d, h, residual=True)

    def execute(self, x: jt.Var) -> jt.Var:
        b, s = x.shape[0], x.shape[1]
        d = self.head_dim
        cos, sin = _rope_tables(s, d, self.theta)
        q = rope(self.wq(x).reshape(b, s, -1, d), cos, sin).permute(0, 2, 1, 3)  # [B, heads, S, d]
        k = rope(self.wk(x).reshape(b, s, -1, d), cos, sin).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(b, s, -1, d).permute(0, 2, 1, 3)
        if self.group > 1:  # each key/value head serves its group of query heads
            k, v = (t.repeat_interleave(self.group, 1) for t in (k, v))
        scores = jt.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(d)
        future = jt.array(np.triu(np.full((s, s), -1e9, dtype=np.float32), 1))  # a query sees no later key
        y = jt.matmul(nn.softmax(scores + future, dim=-1), v)  # [B, heads, S, d]
        return self.wo(y.permute(0, 2, 1, 3).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, f = cfg.hidden_size, cfg.ffn_size
        self.w1, self.w2, self.w3 = linear(cfg, h, f), linear(cfg, f, h, residual=True), linear(cfg, h, f)

    def execute(self, x: jt.Var) -> jt.Var:
        gate = self.w1(x)
        return self.w2(gate * jt.sigmoid(gate) * self.w3(x))


class LlamaBlock(nn.Module):
    """x + attention(RMSNorm(x)), then x + MLP(RMSNorm(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def execute(self, x: jt.Var) -> jt.Var:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class LlamaModel(nn.Module):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits [B, S, V]."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wte.weight = jt.init.gauss((cfg.vocab_size, cfg.hidden_size), "float32", 0.0, cfg.initializer_range)
        self.blocks = nn.ModuleList([LlamaBlock(cfg) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = None if cfg.tied_embeddings else linear(cfg, cfg.hidden_size, cfg.vocab_size)

    def execute(self, input_ids: jt.Var) -> jt.Var:
        x = self.wte(input_ids)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if self.lm_head is None:  # tied: the embedding's transpose is the head
            return jt.matmul(x, self.wte.weight.transpose())
        return self.lm_head(x)


def _numel(module: nn.Module) -> int:
    return sum(int(np.prod(p.shape)) for p in module.parameters() if not p.is_stop_grad())


def param_count(cfg: LlamaConfig) -> int:
    """Trainable parameters of the member, counted from the built pieces without building the whole model: the
    embedding, num_layers x one block (built at the member's width), the final norm, the head where untied."""
    h, v = cfg.hidden_size, cfg.vocab_size
    head = 0 if cfg.tied_embeddings else _numel(linear(cfg, h, v))
    return v * h + cfg.num_layers * _numel(LlamaBlock(cfg)) + _numel(RMSNorm(h, cfg.norm_eps)) + head


__all__ = ["Attention", "FeedForward", "LlamaBlock", "LlamaModel", "RMSNorm", "param_count", "rope"]
