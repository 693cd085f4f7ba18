"""A Llama-3-style decoder in pure torch, laid out like Meta's reference model and torchtitan's.

Pre-norm blocks: ``nn.RMSNorm``; grouped-query attention (query heads share key/value heads in groups) with
rotary position embedding (rotate-half form, base ``rope_theta``) through ``scaled_dot_product_attention``
(``is_causal=True``, ``enable_gqa=True``); a SwiGLU MLP ``w2(silu(w1 x) * w3 x)``; no biases, no dropout; a final
RMSNorm and the LM head, tied to the token embedding or not. Its trainable parameters are exactly
``dlbench.cases.llama.param_count``.

Init: every matrix normal(0, 0.02), the residual output projections (``wo``, ``w2``) / sqrt(2 x layers) as GPT-2,
norms 1; each parameter from a generator of its own name (as gpt.py), so that a pipeline stage, a tensor-parallel
shard or an FSDP shard starts from the whole model's weights. Module names follow gpt.py's (``wte``, ``blocks``,
``lm_head``, ``part``, ``cfg``) so that the split trainer (pipeline.py) drives either decoder. Attention reads its
heads from its projections' widths, so a tensor-parallel rank's share of the heads runs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dlbench.backends.torch.gpt import WHOLE, Part, _seeded
from dlbench.cases.arch import LlamaConfig

RESIDUAL_OUTPUTS = (".wo.weight", ".w2.weight")


def rope_tables(seq: int, head_dim: int, theta: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, [seq, head_dim]: position x theta^(-2i/d), each frequency twice."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    both = torch.cat([angles, angles], dim=-1)
    return both.cos(), both.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate [B, S, heads, d] by the angles (rotate-half form: channel i pairs with channel i + d/2)."""
    first, second = x.chunk(2, dim=-1)
    turned = torch.cat([-second, first], dim=-1)
    return (x * cos[None, :, None, :] + turned * sin[None, :, None, :]).to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.head_dim, self.theta = d, cfg.rope_theta
        self.wq = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.wk = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.wv = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.wo = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.qkv_adapter: nn.Module | None = None  # LoRA's fused QKV adapter (lora.py), its output split q | k | v

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape  # the whole sequence (sequence parallel gathers it before this module)
        d = self.head_dim
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.qkv_adapter is not None:
            dq, dk, dv = self.qkv_adapter(x).split([q.shape[-1], k.shape[-1], v.shape[-1]], dim=-1)
            q, k, v = q + dq, k + dk, v + dv
        q, k, v = (t.view(b, s, -1, d) for t in (q, k, v))
        cos, sin = rope_tables(s, d, self.theta, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.ffn_size, bias=False)
        self.w2 = nn.Linear(cfg.ffn_size, cfg.hidden_size, bias=False)
        self.w3 = nn.Linear(cfg.hidden_size, cfg.ffn_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    """x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)) (or `feed_forward`'s MLP: a mixture of experts;
    `attention`'s: latent or sink attention, moe_attention.py)."""

    def __init__(
        self, cfg: LlamaConfig, feed_forward: nn.Module | None = None, attention: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attention = attention if attention is not None else Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.feed_forward = feed_forward if feed_forward is not None else FeedForward(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


def init_parameter(cfg: LlamaConfig, name: str, p: Tensor) -> None:
    """The init of the parameter called `name` (this module's docstring), from that name's generator; a last
    stage's copy of a tied head draws the token embedding's values. Meta tensors are left alone."""
    if p.is_meta:
        return
    with torch.no_grad():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
            return
        tied = name == "lm_head.weight" and cfg.tied_embeddings
        std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if name.endswith(RESIDUAL_OUTPUTS) else 1.0)
        p.normal_(0.0, std, generator=_seeded("wte.weight" if tied else name))


class LlamaModel(nn.Module):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits [B, S, V].
    A pipeline stage (`part`) holds some of it. With `recompute`, each block's activations are recomputed in the
    backward pass. `feed_forward`, where set, makes each block's MLP (moe.py's experts); `block`, where set,
    makes the block of each global layer number (moe.py's, whose attention and MLP depend on the layer)."""

    def __init__(
        self,
        cfg: LlamaConfig,
        recompute: bool = False,
        part: Part = WHOLE,
        feed_forward: Callable[[], nn.Module] | None = None,
        block: Callable[[int], LlamaBlock] | None = None,
    ) -> None:
        super().__init__()
        self.cfg, self.recompute, self.part = cfg, recompute, part
        if part.first:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        hi = cfg.num_layers if part.hi is None else part.hi
        make = block or (lambda i: LlamaBlock(cfg, feed_forward() if feed_forward else None))
        self.blocks = nn.ModuleDict({str(i): make(i) for i in range(part.lo, hi)})  # global layer numbers
        if part.last:
            self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.norm_eps)
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        for name, p in self.named_parameters():
            init_parameter(cfg, name, p)
        if cfg.tied_embeddings and part.first and part.last:
            self.lm_head.weight = self.wte.weight

    def forward(self, x: Tensor) -> Tensor:
        if self.part.first:
            x = self.wte(x)
        for block in self.blocks.values():
            x = checkpoint(block, x, use_reentrant=False) if self.recompute and self.training else block(x)
        return self.lm_head(self.norm(x)) if self.part.last else x


__all__ = ["Attention", "FeedForward", "LlamaBlock", "LlamaModel", "apply_rope", "init_parameter", "rope_tables"]
