"""A Llama-3-style decoder in flax.linen, laid out like the torch backend's llama.py (#35).

Pre-norm blocks with RMSNorm; grouped-query attention with rotary positions (rotate-half form) under a causal
mask, each key/value head repeated over its group of query heads; a SwiGLU MLP; no biases, no dropout; a final
RMSNorm and the LM head, tied to the token embedding (``Embed.attend``) or not. Trainable parameters: exactly
``dlbench.cases.llama.param_count``. Init: normal(0, 0.02), the residual output projections (``wo``, ``w2``)
/ sqrt(2 x layers), norms 1. Module names (``wq`` ... ``w3``, ``wte``, ``lm_head``) are what llama_mesh.py's
sharding rules read.

LoRA (#47, cases/lora.py): with `lora` set, each targeted matrix gets an adapter ``B(A(dropout(x))) x alpha / r``
(``lora_A_*``: kaiming-uniform as peft, ``lora_B_*``: zeros), the fused QKV one adapter whose output is split over
q, k and v, as the torch backend's lora.py; the optimizer (step.py) updates only the ``lora_`` parameters.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

from dlbench.cases.arch import LlamaConfig
from dlbench.cases.lora import LoraConfig

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


class Adapter(nn.Module):
    """LoRA's low-rank update of one matrix: ``B(A(dropout(x))) x alpha / r``, A kaiming-uniform, B zero."""

    lora: LoraConfig
    out: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        a = nn.Dense(self.lora.rank, use_bias=False, dtype=self.dtype, name="lora_A", kernel_init=_KAIMING_UNIFORM)
        b = nn.Dense(self.out, use_bias=False, dtype=self.dtype, name="lora_B", kernel_init=nn.initializers.zeros)
        return b(a(nn.Dropout(self.lora.dropout, deterministic=not train)(x))) * self.lora.scale


_KAIMING_UNIFORM = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")  # peft's A: U(+-1/sqrt(in))


class LlamaBlock(nn.Module):
    """x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)); with `lora`, adapters beside its targets."""

    cfg: LlamaConfig
    dtype: Any = jnp.float32
    lora: LoraConfig | None = None

    def _adapted(self, name: str, width: int, y: Array, out: Array, train: bool) -> Array:
        """A matrix's output plus its adapter's where LoRA targets it."""
        if self.lora is None or name not in self.lora.targets:
            return out
        return out + Adapter(self.lora, width, self.dtype, name=f"lora_{name}")(y, train)

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
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
        hq, hkv = c.num_heads * d, c.num_kv_heads * d
        q = self._adapted("q", hq, y, dense(hq, name="wq")(y), train)
        k = self._adapted("k", hkv, y, dense(hkv, name="wk")(y), train)
        v = self._adapted("v", hkv, y, dense(hkv, name="wv")(y), train)
        if self.lora is not None and "qkv" in self.lora.targets:
            dq, dk, dv = jnp.split(
                Adapter(self.lora, hq + 2 * hkv, self.dtype, name="lora_qkv")(y, train), [hq, hq + hkv], -1
            )
            q, k, v = q + dq, k + dk, v + dv
        q = rope(q.reshape(b, s, c.num_heads, d), c.rope_theta)
        k = rope(k.reshape(b, s, c.num_kv_heads, d), c.rope_theta)
        v = v.reshape(b, s, c.num_kv_heads, d)
        group = c.num_heads // c.num_kv_heads
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        mask = nn.make_causal_mask(jnp.ones((b, s)))
        att = nn.dot_product_attention(q, k, v, mask=mask, dtype=self.dtype)
        flat = att.reshape(b, s, c.num_heads * d)
        x = x + self._adapted("o", h, flat, residual(name="wo")(flat), train)
        y = norm(name="ffn_norm")(x)
        mlp = "mlp" if self.lora is not None and "mlp" in self.lora.targets else ""
        gate = dense(c.ffn_size, name="w1")(y)
        up = dense(c.ffn_size, name="w3")(y)
        if mlp:
            gate = gate + Adapter(self.lora, c.ffn_size, self.dtype, name="lora_w1")(y, train)
            up = up + Adapter(self.lora, c.ffn_size, self.dtype, name="lora_w3")(y, train)
        ff = nn.silu(gate) * up
        out = residual(name="w2")(ff)
        if mlp:
            out = out + Adapter(self.lora, h, self.dtype, name="lora_w2")(ff, train)
        return x + out


class LlamaModel(nn.Module):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits."""

    cfg: LlamaConfig
    dtype: Any = jnp.float32
    recompute: bool = False  # each block's activations recomputed in the backward pass (nn.remat)
    lora: LoraConfig | None = None  # LoRA's adapters in every block (#47)

    @nn.compact
    def __call__(self, input_ids: Array, train: bool = True) -> Array:
        c = self.cfg
        init = nn.initializers.normal(c.initializer_range)
        wte = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=init, dtype=self.dtype, name="wte")
        x = wte(input_ids)
        block = nn.remat(LlamaBlock, static_argnums=(2,)) if self.recompute else LlamaBlock
        for i in range(c.num_layers):
            x = block(c, dtype=self.dtype, lora=self.lora, name=f"block_{i}")(x, train)
        x = nn.RMSNorm(epsilon=c.norm_eps, dtype=self.dtype, name="norm")(x)
        if c.tied_embeddings:
            return wte.attend(x)
        return nn.Dense(c.vocab_size, use_bias=False, dtype=self.dtype, kernel_init=init, name="lm_head")(x)


__all__ = ["Adapter", "LlamaBlock", "LlamaModel", "rope"]
