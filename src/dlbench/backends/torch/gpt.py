"""GPT-2 (a causal decoder) in pure torch, laid out like HF ``GPT2LMHeadModel`` and Megatron-LM's GPT.

Pre-LayerNorm blocks: causal self-attention through ``torch.nn.functional.scaled_dot_product_attention``
(``is_causal=True``; flash or memory-efficient kernels on a GPU), then a GELU MLP of 4x the width; learned
positions; a final LayerNorm; the LM head shares the token embedding's weight and has no bias. Its trainable
parameters are exactly ``dlbench.cases.gpt.param_count`` (124,439,808 for GPT-2 small). GPT-2's init: normal(0,
0.02), residual output projections scaled by 1/sqrt(2 x layers), zero biases.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dlbench.cases.arch import GptConfig


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the positions before it."""

    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.num_heads:
            raise ValueError(f"width {cfg.hidden_size} is not a multiple of {cfg.num_heads} heads")
        self.num_heads, self.dropout_p = cfg.num_heads, cfg.dropout
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.num_heads, h // self.num_heads).transpose(1, 2)
                   for t in self.qkv(x).split(h, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p if self.training else 0.0,
                                           is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, s, h)))


class GptBlock(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)) with a tanh-approximated GELU, as GPT-2 has it."""

    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        h, ffn = cfg.hidden_size, cfg.mlp_ratio * cfg.hidden_size
        self.ln_1 = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.fc = nn.Linear(h, ffn)
        self.proj = nn.Linear(ffn, h)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")))


class GptLMHeadModel(nn.Module):
    """Token + position embeddings, the decoder blocks, a final LayerNorm and the (tied) vocabulary projection:
    token ids [B, S] -> logits [B, S, V]."""

    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(GptBlock(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._init_weights()
        if cfg.tied_embeddings:
            self.lm_head.weight = self.wte.weight

    def _init_weights(self) -> None:
        std = self.cfg.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.blocks:
            assert isinstance(block, GptBlock)
            for proj in (block.attn.proj, block.proj):  # residual outputs: GPT-2's 1/sqrt(2 L) scaling
                nn.init.normal_(proj.weight, 0.0, std / math.sqrt(2 * self.cfg.num_layers))

    def forward(self, input_ids: Tensor) -> Tensor:
        s = input_ids.shape[1]
        if s > self.cfg.max_positions:
            raise ValueError(f"sequence {s} is longer than the {self.cfg.max_positions} learned positions")
        positions = torch.arange(s, device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(positions)[None])
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


__all__ = ["CausalSelfAttention", "GptBlock", "GptLMHeadModel"]
