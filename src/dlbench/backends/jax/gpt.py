"""GPT-2 (a causal decoder) in flax.linen, laid out like HF ``GPT2LMHeadModel`` and the torch backend's gpt.py.

Pre-LayerNorm blocks: causal self-attention (``nn.dot_product_attention`` under a causal mask), then a GELU MLP
(tanh approximation, as GPT-2) of ``mlp_ratio`` x the width; learned positions; a final LayerNorm; the LM head is
the token embedding (``Embed.attend``), no bias. Trainable parameters: exactly ``dlbench.cases.gpt.param_count``
(124,439,808 for GPT-2 small). GPT-2's init: normal(0, 0.02), residual output projections normal(0, 0.02 /
sqrt(2 x layers)), zero biases.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

from dlbench.cases.arch import GptConfig

Array = Any


class GptBlock(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x))."""

    cfg: GptConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, mask: Array, train: bool) -> Array:
        c = self.cfg
        b, s, h = x.shape
        dense = partial(nn.Dense, kernel_init=nn.initializers.normal(c.initializer_range), dtype=self.dtype)
        residual = partial(
            nn.Dense,
            h,
            dtype=self.dtype,
            kernel_init=nn.initializers.normal(c.initializer_range / math.sqrt(2 * c.num_layers)),
        )
        norm = partial(nn.LayerNorm, epsilon=c.layer_norm_eps, dtype=self.dtype)
        drop = partial(nn.Dropout, c.dropout, deterministic=not train)
        # The fused projection's columns head by head ([q k v] of head 0, then head 1 ...), as Megatron-LM lays
        # them out: a column split over tensor-parallel devices (tensor_parallel.py) leaves each whole heads.
        qkv = dense(3 * h, name="qkv")(norm(name="ln_1")(x)).reshape(b, s, c.num_heads, 3, h // c.num_heads)
        dropout_rng = self.make_rng("dropout") if train and c.dropout > 0 else None
        y = nn.dot_product_attention(
            qkv[..., 0, :],
            qkv[..., 1, :],
            qkv[..., 2, :],
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=c.dropout,
            deterministic=not train,
            dtype=self.dtype,
        )
        x = x + drop()(residual(name="attn_proj")(y.reshape(b, s, h)))
        ff = nn.gelu(dense(c.mlp_ratio * h, name="fc")(norm(name="ln_2")(x)), approximate=True)
        return x + drop()(residual(name="proj")(ff))


class GptLMHeadModel(nn.Module):
    """Token + position embeddings, the decoder blocks, a final LayerNorm and the tied vocabulary projection:
    token ids [B, S] -> logits [B, S, V]."""

    cfg: GptConfig
    dtype: Any = jnp.float32
    recompute: bool = False  # each block's activations recomputed in the backward pass (nn.remat)

    @nn.compact
    def __call__(self, input_ids: Array, train: bool = True) -> Array:
        c = self.cfg
        if not c.tied_embeddings:
            raise ValueError("the JAX GPT has a tied LM head only")
        s = input_ids.shape[1]
        if s > c.max_positions:
            raise ValueError(f"sequence {s} is longer than the {c.max_positions} learned positions")
        init = nn.initializers.normal(c.initializer_range)
        wte = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=init, dtype=self.dtype, name="wte")
        wpe = nn.Embed(c.max_positions, c.hidden_size, embedding_init=init, dtype=self.dtype, name="wpe")
        x = nn.Dropout(c.dropout, deterministic=not train)(wte(input_ids) + wpe(jnp.arange(s))[None])
        mask = nn.make_causal_mask(input_ids)  # [B, 1, S, S]: position i sees 0..i
        block = nn.remat(GptBlock, static_argnums=(3,)) if self.recompute else GptBlock
        for i in range(c.num_layers):
            x = block(c, dtype=self.dtype, name=f"block_{i}")(x, mask, train)
        return wte.attend(nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="ln_f")(x))


__all__ = ["GptBlock", "GptLMHeadModel"]
