"""BERT-base for pre-training (MLM + NSP) in Keras 3 (keras.ops and keras.layers only: any Keras backend), laid
out like HF ``BertForPreTraining``.

Same trainable-parameter count as the torch backend's model (110,106,428): the MLM decoder reuses the word
embedding matrix (tied, counted once) and has its own bias. As in Google's and NVIDIA's pre-training, the
masked-LM transform, norm and vocabulary projection run on the masked positions only, gathered first
(``mlm_positions``, dlbench.data.synthetic). Query, key and value are one fused projection (the same parameters
as three). Attention scores and softmax run in float32 under mixed precision.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import keras
from keras import layers, ops

from dlbench.cases.arch import BertConfig

Tensor: TypeAlias = Any  # what Keras layers receive and return: the backend's tensors


def _init(cfg: BertConfig) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=cfg.initializer_range)


def _gelu(x: Tensor) -> Tensor:
    """Exact (erf) GELU, as HF BERT and torch's F.gelu use."""
    return keras.activations.gelu(x, approximate=False)


class BertEmbeddings(layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.word = layers.Embedding(cfg.vocab_size, cfg.hidden_size, embeddings_initializer=_init(cfg))
        self.position = layers.Embedding(
            cfg.max_position_embeddings, cfg.hidden_size, embeddings_initializer=_init(cfg)
        )
        self.token_type = layers.Embedding(cfg.type_vocab_size, cfg.hidden_size, embeddings_initializer=_init(cfg))
        self.norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.drop = layers.Dropout(cfg.dropout)

    def call(self, input_ids: Tensor, token_type_ids: Tensor, training: bool = False) -> Tensor:
        """[B, S] ids -> [B, S, H] embeddings."""
        positions = self.position(ops.arange(ops.shape(input_ids)[1]))
        x = self.word(input_ids) + positions[None] + self.token_type(token_type_ids)
        return self.drop(self.norm(x), training=training)


class BertLayer(layers.Layer):
    """One post-LayerNorm transformer encoder layer: self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.heads = cfg.num_heads
        self.hidden = cfg.hidden_size
        init = _init(cfg)
        self.qkv = layers.Dense(3 * cfg.hidden_size, kernel_initializer=init)
        self.attn_out = layers.Dense(cfg.hidden_size, kernel_initializer=init)
        self.attn_norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.intermediate = layers.Dense(cfg.intermediate_size, kernel_initializer=init)
        self.ffn_out = layers.Dense(cfg.hidden_size, kernel_initializer=init)
        self.out_norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.drop = layers.Dropout(cfg.dropout)
        self.attn_drop = layers.Dropout(cfg.attention_dropout)

    def call(self, x: Tensor, mask_bias: Tensor, training: bool = False) -> Tensor:
        """[B, S, H] -> [B, S, H]; mask_bias is [B, 1, 1, S] float32, 0 to attend and -1e9 to ignore."""
        b, s = ops.shape(x)[0], ops.shape(x)[1]
        head_dim = self.hidden // self.heads
        qkv = ops.reshape(self.qkv(x), (b, s, 3, self.heads, head_dim))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, S, N, D]
        wide = "float64" if x.dtype == "float64" else "float32"  # at least float32 (float64: the same-model check)
        scores = ops.cast(ops.einsum("bqnd,bknd->bnqk", q, k), wide) * (head_dim**-0.5) + ops.cast(mask_bias, wide)
        probs = self.attn_drop(ops.cast(ops.softmax(scores, axis=-1), x.dtype), training=training)
        ctx = ops.reshape(ops.einsum("bnqk,bknd->bqnd", probs, v), (b, s, self.hidden))
        x = self.attn_norm(x + self.drop(self.attn_out(ctx), training=training))
        ff = self.ffn_out(_gelu(self.intermediate(x)))
        return self.out_norm(x + self.drop(ff, training=training))


class BertForPretraining(keras.Model):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        cfg = cfg or BertConfig()
        self.cfg = cfg
        init = _init(cfg)
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = [BertLayer(cfg) for _ in range(cfg.num_layers)]
        self.pooler = layers.Dense(cfg.hidden_size, activation="tanh", kernel_initializer=init)
        self.mlm_transform = layers.Dense(cfg.hidden_size, kernel_initializer=init)
        self.mlm_norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.mlm_bias = self.add_weight(shape=(cfg.vocab_size,), initializer="zeros", name="mlm_bias")
        self.nsp = layers.Dense(2, kernel_initializer=init)

    def call(self, inputs: dict[str, Tensor], training: bool = False) -> tuple[Tensor, Tensor]:
        """MLM logits [B, P, vocab] at the masked positions ``mlm_positions`` [B, P], and NSP logits [B, 2];
        attention_mask is [B, S], 1 = attend."""
        mask = ops.cast(inputs["attention_mask"], "float32")[:, None, None, :]
        mask_bias = (1.0 - mask) * -1e9
        x = self.embeddings(inputs["input_ids"], inputs["token_type_ids"], training=training)
        for layer in self.encoder:
            x = layer(x, mask_bias, training=training)
        pooled = self.pooler(x[:, 0])
        positions = ops.cast(inputs["mlm_positions"], "int32")[:, :, None]
        masked = ops.take_along_axis(x, positions, axis=1)  # [B, P, H]
        h = self.mlm_norm(_gelu(self.mlm_transform(masked)))
        decoder = ops.cast(self.embeddings.word.embeddings, h.dtype)  # tied to the word embeddings
        mlm_logits = ops.matmul(h, ops.transpose(decoder)) + ops.cast(self.mlm_bias, h.dtype)
        return mlm_logits, self.nsp(pooled)


def build_bert(cfg: BertConfig | None = None) -> BertForPretraining:
    """A BERT-base pre-training model with its variables created (one tiny eager forward pass)."""
    model = BertForPretraining(cfg)
    ids = ops.zeros((1, 2), dtype="int32")
    model(
        {
            "input_ids": ids,
            "token_type_ids": ids,
            "attention_mask": ops.ones((1, 2), dtype="int32"),
            "mlm_positions": ops.zeros((1, 1), dtype="int32"),
        }
    )
    return model


__all__ = ["BertConfig", "BertForPretraining", "build_bert"]
