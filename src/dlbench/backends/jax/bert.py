"""BERT-base for pre-training (MLM + NSP) in flax.linen, laid out like HF ``BertForPreTraining``, with the
masked-LM head of Google's and NVIDIA's pre-training: it runs on the gathered masked positions only.

Same trainable-parameter count as the case (110,106,428): the MLM decoder is the word embedding
(``Embed.attend``) plus its own bias. Query, key and value are one fused projection (the same
parameters as three separate ones).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax.numpy as jnp
import optax
from flax import linen as nn

from dlbench.cases.arch import BertConfig

Array = Any


def _gelu(x: Array) -> Array:
    return nn.gelu(x, approximate=False)  # HF BERT's exact erf GELU


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer: fused-QKV self-attention, then the GELU feed-forward."""

    cfg: BertConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, mask: Array, train: bool) -> Array:
        c = self.cfg
        dense = partial(nn.Dense, kernel_init=nn.initializers.normal(c.initializer_range), dtype=self.dtype)
        norm = partial(nn.LayerNorm, epsilon=c.layer_norm_eps, dtype=self.dtype)
        drop = partial(nn.Dropout, c.dropout, deterministic=not train)
        b, s, h = x.shape
        qkv = dense(3 * h, name="qkv")(x).reshape(b, s, 3, c.num_heads, h // c.num_heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        dropout_rng = self.make_rng("dropout") if train and c.attention_dropout > 0 else None
        ctx = nn.dot_product_attention(
            q,
            k,
            v,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=c.attention_dropout,
            deterministic=not train,
            dtype=self.dtype,
        )
        x = norm(name="attn_norm")(x + drop()(dense(h, name="attn_out")(ctx.reshape(b, s, h))))
        ff = dense(h, name="output")(_gelu(dense(c.intermediate_size, name="intermediate")(x)))
        return norm(name="out_norm")(x + drop()(ff))


class BertForPretraining(nn.Module):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    cfg: BertConfig = BertConfig()
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(
        self, input_ids: Array, token_type_ids: Array, attention_mask: Array, mlm_positions: Array, train: bool = True
    ) -> tuple[Array, Array]:
        """MLM logits [B, P, vocab] at the masked positions [B, P], and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        c = self.cfg
        init = nn.initializers.normal(c.initializer_range)
        dense = partial(nn.Dense, kernel_init=init, dtype=self.dtype)
        norm = partial(nn.LayerNorm, epsilon=c.layer_norm_eps, dtype=self.dtype)
        words = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=init, dtype=self.dtype, name="word_embeddings")
        positions = nn.Embed(
            c.max_position_embeddings, c.hidden_size, embedding_init=init, dtype=self.dtype, name="position_embeddings"
        )
        types = nn.Embed(
            c.type_vocab_size, c.hidden_size, embedding_init=init, dtype=self.dtype, name="token_type_embeddings"
        )
        seq = input_ids.shape[1]
        x = words(input_ids) + positions(jnp.arange(seq))[None] + types(token_type_ids)
        x = nn.Dropout(c.dropout, deterministic=not train)(norm(name="emb_norm")(x))
        mask = nn.make_attention_mask(jnp.ones_like(attention_mask), attention_mask > 0)  # [B, 1, S, S]
        for i in range(c.num_layers):
            x = BertLayer(c, dtype=self.dtype, name=f"layer_{i}")(x, mask, train)
        pooled = jnp.tanh(dense(c.hidden_size, name="pooler")(x[:, 0]))
        masked = jnp.take_along_axis(x, mlm_positions[:, :, None].astype(jnp.int32), axis=1)  # [B, P, H]
        h = norm(name="mlm_norm")(_gelu(dense(c.hidden_size, name="mlm_transform")(masked)))
        mlm_bias = self.param("mlm_bias", nn.initializers.zeros_init(), (c.vocab_size,), jnp.float32)
        mlm_logits = words.attend(h) + jnp.asarray(mlm_bias, self.dtype)  # tied decoder: counted once
        return mlm_logits, dense(2, name="nsp")(pooled)


def mlm_nsp_loss(mlm_logits: Array, nsp_logits: Array, mlm_ids: Array, mlm_weights: Array, nsp_labels: Array) -> Array:
    """Google's masked-LM loss, sum(ce x weight) / (sum(weight) + 1e-5) over the gathered predictions (weight 0
    = padding), plus the next-sentence cross-entropy; in fp32."""
    per_token = optax.softmax_cross_entropy_with_integer_labels(mlm_logits.astype(jnp.float32), mlm_ids)
    weights = mlm_weights.astype(jnp.float32)
    mlm = jnp.sum(per_token * weights) / (jnp.sum(weights) + 1e-5)
    nsp = optax.softmax_cross_entropy_with_integer_labels(nsp_logits.astype(jnp.float32), nsp_labels).mean()
    return mlm + nsp


__all__ = ["BertForPretraining", "mlm_nsp_loss"]
