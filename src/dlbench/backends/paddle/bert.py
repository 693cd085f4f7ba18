"""BERT-base for pre-training (MLM + NSP) in paddle.nn, laid out like HF ``BertForPreTraining``.

Same trainable-parameter count as ``BertForPreTraining(BertConfig())`` (110,106,428): the MLM decoder
reuses the word-embedding matrix (tied, counted once) and has its own bias. As in Google's and NVIDIA's
pre-training, the masked-LM head runs on the masked positions only, gathered first (dlbench.data.synthetic).
Query, key and value are one fused projection (the same parameters as three separate ones). Attention is
written out with matmul and softmax, so that it runs on the CPU and under ``paddle.jit.to_static`` alike.
"""

from __future__ import annotations

import math

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn

from dlbench.cases.arch import BertConfig


class BertEmbeddings(nn.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = paddle.arange(input_ids.shape[1], dtype="int64")
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions).unsqueeze(0)
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(x))


class BertLayer(nn.Layer):
    """One post-LayerNorm transformer encoder layer: self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.attn_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.out_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.attn_dropout = nn.Dropout(cfg.attention_dropout)

    def forward(self, x: Tensor, mask_add: Tensor) -> Tensor:
        b, s, h = x.shape
        qkv = self.qkv(x).reshape([b, s, 3, self.num_heads, self.head_dim]).transpose([2, 0, 3, 1, 4])
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = paddle.matmul(q, k, transpose_y=True) * (1.0 / math.sqrt(self.head_dim))
        probs = self.attn_dropout(F.softmax(scores + mask_add.astype(scores.dtype), axis=-1))
        ctx = paddle.matmul(probs, v).transpose([0, 2, 1, 3]).reshape([b, s, h])
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        ff = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(ff))


class BertForPretraining(nn.Layer):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BertConfig()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = nn.LayerList([BertLayer(cfg) for _ in range(cfg.num_layers)])
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.mlm_bias = self.create_parameter([cfg.vocab_size], is_bias=True)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self._init_weights()

    def _init_weights(self) -> None:
        """HF BERT init: normal(0, 0.02) weights, zero biases, LayerNorm 1/0, zero padding row."""
        normal = nn.initializer.Normal(0.0, self.config.initializer_range)
        zeros, ones = nn.initializer.Constant(0.0), nn.initializer.Constant(1.0)
        for layer in self.sublayers():
            if isinstance(layer, (nn.Linear, nn.Embedding)):
                normal(layer.weight)
                if isinstance(layer, nn.Linear) and layer.bias is not None:
                    zeros(layer.bias)
            elif isinstance(layer, nn.LayerNorm):
                ones(layer.weight)
                zeros(layer.bias)
        with paddle.no_grad():
            self.embeddings.word_embeddings.weight[self.config.pad_token_id] = 0.0
        zeros(self.mlm_bias)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, mlm_positions: Tensor
    ) -> tuple[Tensor, Tensor]:
        """MLM logits [B, P, vocab] at the masked positions [B, P], and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        mask_add = ((1.0 - attention_mask.astype("float32")) * -1e4).unsqueeze([1, 2])
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask_add)
        pooled = paddle.tanh(self.pooler(x[:, 0]))
        h = self.mlm_norm(F.gelu(self.mlm_transform(gather_positions(x, mlm_positions))))
        word = self.embeddings.word_embeddings.weight  # tied decoder: [vocab, hidden]
        mlm_logits = paddle.matmul(h, word.astype(h.dtype), transpose_y=True) + self.mlm_bias.astype(h.dtype)
        return mlm_logits, self.nsp(pooled)


def gather_positions(x: Tensor, positions: Tensor) -> Tensor:
    """The rows of x [B, S, H] at positions [B, P], as [B, P, H] (Google's gather_indexes: one flat gather)."""
    b, s, h = x.shape
    p = positions.shape[1]
    flat = positions + paddle.arange(b, dtype=positions.dtype).unsqueeze(1) * s
    return paddle.gather(x.reshape([b * s, h]), flat.reshape([-1])).reshape([b, p, h])


__all__ = ["BertConfig", "BertForPretraining", "gather_positions"]
