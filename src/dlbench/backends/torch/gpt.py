"""GPT-2 (a causal decoder) in pure torch, laid out like HF ``GPT2LMHeadModel`` and Megatron-LM's GPT.

Pre-LayerNorm blocks: causal self-attention through ``torch.nn.functional.scaled_dot_product_attention``
(``is_causal=True``; flash or memory-efficient kernels on a GPU), then a GELU MLP of 4x the width; learned
positions; a final LayerNorm; the LM head shares the token embedding's weight and has no bias. Its trainable
parameters are exactly ``dlbench.cases.gpt.param_count`` (124,439,808 for GPT-2 small). GPT-2's init: normal(0,
0.02), residual output projections scaled by 1/sqrt(2 x layers), zero biases; each parameter from a generator of
its own name, so that a pipeline stage or a tensor-parallel shard starts from the whole model's weights.
Attention reads its width from its projection, so a tensor-parallel rank's share of the heads runs unchanged.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dlbench.cases.arch import GptConfig


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the positions before it."""

    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.num_heads:
            raise ValueError(f"width {cfg.hidden_size} is not a multiple of {cfg.num_heads} heads")
        self.head_dim, self.dropout_p = cfg.hidden_size // cfg.num_heads, cfg.dropout
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        qkv = self.qkv(x)
        width = qkv.shape[-1] // 3  # this rank's heads x head size: all of them, or its tensor-parallel share
        q, k, v = (t.view(b, s, width // self.head_dim, self.head_dim).transpose(1, 2) for t in qkv.split(width, 2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, s, width)))


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


@dataclass(frozen=True)
class Part:
    """The layers [lo, hi) a pipeline stage holds; the first stage embeds the tokens, the last projects to the
    vocabulary (one stage: the whole model). `hi` None = every layer."""

    lo: int = 0
    hi: int | None = None
    first: bool = True
    last: bool = True


WHOLE = Part()


def _seeded(name: str) -> torch.Generator:
    """A generator for one parameter, from the global seed and the parameter's name: the same weights whichever
    stage or rank builds it, so a split model starts where the whole model does."""
    return torch.Generator().manual_seed((torch.initial_seed() + zlib.crc32(name.encode())) % 2**63)


def init_parameter(cfg: GptConfig, name: str, p: Tensor) -> None:
    """GPT-2's init of the parameter called `name`, drawn from that name's generator (`_seeded`): normal(0, 0.02),
    residual output projections / sqrt(2 L), zero biases, LayerNorm (1, 0). A last stage's untied copy of the tied
    head draws the token embedding's values (the pipeline keeps the two in step). Meta tensors are left alone."""
    if p.is_meta:
        return
    with torch.no_grad():
        if name.startswith("ln_") or ".ln_" in name:
            p.fill_(1.0 if name.endswith("weight") else 0.0)
        elif name.endswith("bias"):
            p.zero_()
        else:
            tied = name == "lm_head.weight" and cfg.tied_embeddings
            std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if name.endswith(".proj.weight") else 1.0)
            p.normal_(0.0, std, generator=_seeded("wte.weight" if tied else name))


class GptLMHeadModel(nn.Module):
    """Token + position embeddings, the decoder blocks, a final LayerNorm and the (tied) vocabulary projection:
    token ids [B, S] -> logits [B, S, V]. A pipeline stage (`part`) holds some of it: hidden states in or out.
    With `recompute`, each block's activations are recomputed in the backward pass (activation checkpointing)."""

    def __init__(self, cfg: GptConfig, recompute: bool = False, part: Part = WHOLE) -> None:
        super().__init__()
        self.cfg, self.recompute, self.part = cfg, recompute, part
        if part.first:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden_size)
            self.drop = nn.Dropout(cfg.dropout)
        hi = cfg.num_layers if part.hi is None else part.hi
        self.blocks = nn.ModuleDict({str(i): GptBlock(cfg) for i in range(part.lo, hi)})  # global layer numbers
        if part.last:
            self.ln_f = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._init_weights()
        if cfg.tied_embeddings and part.first and part.last:
            self.lm_head.weight = self.wte.weight

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            init_parameter(self.cfg, name, p)

    def forward(self, x: Tensor) -> Tensor:
        if self.part.first:
            s = x.shape[1]
            if s > self.cfg.max_positions:
                raise ValueError(f"sequence {s} is longer than the {self.cfg.max_positions} learned positions")
            positions = torch.arange(s, device=x.device)
            x = self.drop(self.wte(x) + self.wpe(positions)[None])
        for block in self.blocks.values():
            x = checkpoint(block, x, use_reentrant=False) if self.recompute and self.training else block(x)
        return self.lm_head(self.ln_f(x)) if self.part.last else x


__all__ = ["WHOLE", "CausalSelfAttention", "GptBlock", "GptLMHeadModel", "Part", "init_parameter"]
