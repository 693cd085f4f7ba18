"""A Llama-3-style decoder in flax.linen, laid out like the torch backend's llama.py (#35).

Pre-norm blocks with RMSNorm; grouped-query attention with rotary positions (rotate-half form) under a causal
mask, each key/value head repeated over its group of query heads; a SwiGLU MLP; no biases, no dropout; a final
RMSNorm and the LM head, tied to the token embedding (``Embed.attend``) or not. Trainable parameters: exactly
``dlbench.cases.llama.param_count``. Init: normal(0, 0.02), the residual output projections (``wo``, ``w2``)
/ sqrt(2 x layers), norms 1. Module names (``wq`` ... ``w3``, ``wte``, ``lm_head``) are what llama_mesh.py's
sharding rules read.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

from dlbench.cases.arch import LlamaConfig

Array = Any


def rope(x: Array, theta: float) -> Array:
    """Rotate [B, S, heads, d] by position x theta^(-2i/d) (channel i pairs with channel i + d/2)."""
    s, d = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angles = jnp.outer(jnp.arange(s, dtype=jnp.float32), inv)
    both = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(both)[None, :, None, :], jnp.sin(both)[None, :, None, :]
    first, second = jnp.split(x, 2, axis=-1)
    return (x * cos + jnp.concatenate([-second, first], axis=-1) * sin).astype(x.dtype)


class LlamaBlock(nn.Module):
    """x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""

    cfg: LlamaConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c = self.cfg
        b, s, h = x.shape
        d = c.head_dim
        dense = partial(
            nn.Dense, use_bias=False, dtype=self.dtype, kernel_init=nn.initializers.normal(c.initializer_range)
        )
        residual = partial(
            nn.Dense,
            h,
            use_bias=False,
            dtype=self.dtype,
            kernel_init=nn.initializers.normal(c.initializer_range / math.sqrt(2 * c.num_layers)),
        )
        norm = partial(nn.RMSNorm, epsilon=c.norm_eps, dtype=self.dtype)
        y = norm(name="attention_norm")(x)
        q = rope(dense(c.num_heads * d, name="wq")(y).reshape(b, s, c.num_heads, d), c.rope_theta)
        k = rope(dense(c.num_kv_heads * d, name="wk")(y).reshape(b, s, c.num_kv_heads, d), c.rope_theta)
        v = dense(c.num_kv_heads * d, name="wv")(y).reshape(b, s, c.num_kv_heads, d)
        group = c.num_heads // c.num_kv_heads
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        mask = nn.make_causal_mask(jnp.ones((b, s)))
        att = nn.dot_product_attention(q, k, v, mask=mask, dtype=self.dtype)
        x = x + residual(name="wo")(att.reshape(b, s, c.num_heads * d))
        y = norm(name="ffn_norm")(x)
        ff = nn.silu(dense(c.ffn_size, name="w1")(y)) * dense(c.ffn_size, name="w3")(y)
        return x + residual(name="w2")(ff)


class LlamaModel(nn.Module):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits."""

    cfg: LlamaConfig
    dtype: Any = jnp.float32
    recompute: bool = False  # each block's activations recomputed in the backward pass (nn.remat)

    @nn.compact
    def __call__(self, input_ids: Array, train: bool = True) -> Array:
        c = self.cfg
        init = nn.initializers.normal(c.initializer_range)
        wte = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=init, dtype=self.dtype, name="wte")
        x = wte(input_ids)
        block = nn.remat(LlamaBlock) if self.recompute else LlamaBlock
        for i in range(c.num_layers):
            x = block(c, dtype=self.dtype, name=f"block_{i}")(x)
        x = nn.RMSNorm(epsilon=c.norm_eps, dtype=self.dtype, name="norm")(x)
        if c.tied_embeddings:
            return wte.attend(x)
        return nn.Dense(c.vocab_size, use_bias=False, dtype=self.dtype, kernel_init=init, name="lm_head")(x)


__all__ = ["LlamaBlock", "LlamaModel", "rope"]
