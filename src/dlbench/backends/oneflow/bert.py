"""BERT-base for pre-training (MLM + NSP) in OneFlow, laid out like HF ``BertForPreTraining`` (as the torch
backend's bert.py, line for line).

Same trainable-parameter count as ``BertForPreTraining(BertConfig())`` (110,106,428): the MLM decoder
shares its weight with the word embeddings and has its own bias. As in Google's and NVIDIA's pre-training, the
masked-LM head runs on the masked positions only, gathered first (dlbench.data.synthetic). Query, key and value are one fused
projection (the same parameters as three separate ones). OneFlow 0.9 has no fused scaled-dot-product
attention, so attention is written out: softmax(QK^T / sqrt(d) + mask bias) V, with dropout on the weights.
"""

from __future__ import annotations

import math

import oneflow as flow
import oneflow.nn.functional as F
from oneflow import Tensor, nn

from dlbench.cases.arch import BertConfig


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = flow.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(x))


class BertLayer(nn.Module):
    """One post-LayerNorm transformer encoder layer: self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.attn_dropout = nn.Dropout(cfg.attention_dropout)
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.attn_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.out_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        b, s, h = x.shape
        d = h // self.num_heads
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = flow.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d)) + mask_bias
        ctx = flow.matmul(self.attn_dropout(F.softmax(scores, dim=-1)), v)
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
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
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlm_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlm_decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mlm_bias = nn.Parameter(flow.zeros(cfg.vocab_size))
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self.apply(self._init_weights)
        self.mlm_decoder.weight = self.embeddings.word_embeddings.weight  # tied: counted once

    def _init_weights(self, module: nn.Module) -> None:
        """HF BERT init: normal(0, 0.02) weights, zero biases, LayerNorm 1/0, zero padding row."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                with flow.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor,
                mlm_positions: Tensor) -> tuple[Tensor, Tensor]:
        """MLM logits [B, P, vocab] at the masked positions [B, P], and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        mask_bias = (1.0 - attention_mask.to(flow.float32))[:, None, None, :] * -10000.0
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = flow.tanh(self.pooler(x[:, 0]))
        masked = flow.gather(x, 1, mlm_positions[:, :, None].expand(-1, -1, x.shape[-1]))
        h = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
        mlm_logits = F.linear(h, self.mlm_decoder.weight, self.mlm_bias)
        return mlm_logits, self.nsp(pooled)


__all__ = ["BertConfig", "BertForPretraining"]
