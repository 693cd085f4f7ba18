"""BERT-base for pre-training (MLM + NSP) in MegEngine, laid out like HF ``BertForPreTraining`` (as the torch
backend's bert.py).

Same trainable-parameter count as ``BertForPreTraining(BertConfig())`` (110,106,428): the MLM decoder is the
word-embedding matrix itself (a matmul with it, transposed) plus its own bias. As in Google's and NVIDIA's
pre-training, the masked-LM head runs on the masked positions only, gathered first (dlbench.data.synthetic; here
as a one-hot matmul, which jit.trace takes).
Query, key and value are one fused projection (the same parameters as three separate ones); attention is written
out: softmax(QK^T / sqrt(d) + mask bias) V, with dropout on the weights.
"""

from __future__ import annotations

import math

import megengine.functional as F
import megengine.module as nn
import numpy as np
from megengine import Parameter, Tensor

from dlbench.cases.arch import BertConfig


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = self.position_embeddings.weight[:input_ids.shape[1]]  # rows 0..S-1 (traces with symbolic S)
        x = self.word_embeddings(input_ids) + F.expand_dims(positions, 0)
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(x))


class BertLayer(nn.Module):
    """One post-LayerNorm transformer encoder layer: self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.attn_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.out_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.attn_dropout = nn.Dropout(cfg.attention_dropout)

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        b, s, h = x.shape
        d = h // self.num_heads
        qkv = self.qkv(x).reshape(b, s, 3, self.num_heads, d).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = F.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(d)) + mask_bias
        ctx = F.matmul(self.attn_dropout(F.softmax(scores, axis=-1)), v)
        ctx = ctx.transpose(0, 2, 1, 3).reshape(b, s, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        ff = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(ff))


class BertForPretraining(nn.Module):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BertConfig()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = [BertLayer(cfg) for _ in range(cfg.num_layers)]
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlm_bias = Parameter(np.zeros(cfg.vocab_size, np.float32))
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self._init_weights()

    def _init_weights(self) -> None:
        """HF BERT init: normal(0, 0.02) weights, zero biases, LayerNorm 1/0, zero padding row."""
        std = self.config.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        word = self.embeddings.word_embeddings.weight
        word[self.config.pad_token_id] = 0.0

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor,
                mlm_positions: Tensor) -> tuple[Tensor, Tensor]:
        """MLM logits [B, P, vocab] at the masked positions [B, P], and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        mask_bias = F.expand_dims((1.0 - attention_mask.astype("float32")) * -10000.0, (1, 2))
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = F.tanh(self.pooler(x[:, 0]))
        # The gather as a one-hot [B, P, S] x [B, S, H] batched matmul: it traces with static shapes, where
        # MegEngine's advanced indexing does not (and its cost, P x S x H per sample, is well under 1% of BERT's).
        masked = F.matmul(F.one_hot(mlm_positions, x.shape[1]).astype("float32"), x)
        h = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
        mlm_logits = F.matmul(h, self.embeddings.word_embeddings.weight, transpose_b=True) + self.mlm_bias
        return mlm_logits, self.nsp(pooled)


__all__ = ["BertConfig", "BertForPretraining"]
