"""DeepSeek-V3's and GPT-OSS's attention and experts in pure torch (#48), for the MoE decoder (moe.py).

- ``LatentAttention``: multi-head latent attention (DeepSeek-V2/V3). The query goes through a low-rank bottleneck
  (``wq_a``, an RMSNorm ``q_norm``, ``wq_b``; one ``wq`` where the query rank is 0); keys and values come from one
  latent: ``wkv_a`` maps x to a kv_rank-wide latent plus one rope-wide rotary key shared by every head, the latent
  is normalised (``kv_norm``) and ``wkv_b`` expands it to every head's position-free key part and value. Each
  head's query and key are [nope part, rotary part]; rotary positions (rotate-half form, as llama.py; DeepSeek's
  reference turns interleaved pairs: the same parameters and FLOPs) apply to the rotary parts only. Causal
  ``scaled_dot_product_attention`` with value width v (the scale is 1 / sqrt(nope + rope), as without YaRN).
- ``SinkAttention``: GPT-OSS's grouped-query attention, with head width `head_dim` (not hidden / heads), biases on
  every projection, one learned sink logit per head joining each query's softmax denominator (its probability is
  dropped: the head may attend to nothing), and in the even layers a sliding window of the last `sliding_window`
  tokens (the query's own included, as Hugging Face's mask). The softmax over [scores, sink] is computed explicitly
  in fp32 (Hugging Face's eager form): no fused kernel of torch's takes the sink's logit, so this attention holds
  the B x H x S x S scores in memory, and a GPU figure carries that cost.
- ``Expert``: a SwiGLU expert ``w2(act(w1 x, w3 x))``, with biases where the shape has them and GPT-OSS's clamped
  activation ``(clamp(u, -7, 7) + 1) * g * sigmoid(1.702 g)``, g = clamp(w1 x, max=7).

Init (moe.py's MoeModel): matrices as llama.py's, every bias zero, the sinks normal(0, 0.02), as Hugging Face's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dlbench.backends.torch.llama import apply_rope, rope_tables
from dlbench.cases.arch import MoeConfig
from dlbench.cases.moe import head_width

SWIGLU_LIMIT, SWIGLU_ALPHA = 7.0, 1.702  # GPT-OSS's clamped SwiGLU (swiglu_limit; the sigmoid's alpha)


class LatentAttention(nn.Module):
    """Multi-head latent attention (this module's docstring)."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__()
        assert cfg.mla is not None
        m, b = cfg.mla, cfg.base
        h, heads = b.hidden_size, b.num_heads
        self.mla, self.heads, self.theta = m, heads, b.rope_theta
        if m.q_rank:
            self.wq_a = nn.Linear(h, m.q_rank, bias=False)
            self.q_norm = nn.RMSNorm(m.q_rank, eps=b.norm_eps)
            self.wq_b = nn.Linear(m.q_rank, heads * m.qk_dim, bias=False)
        else:
            self.wq = nn.Linear(h, heads * m.qk_dim, bias=False)
        self.wkv_a = nn.Linear(h, m.kv_rank + m.rope, bias=False)
        self.kv_norm = nn.RMSNorm(m.kv_rank, eps=b.norm_eps)
        self.wkv_b = nn.Linear(m.kv_rank, heads * (m.nope + m.v), bias=False)
        self.wo = nn.Linear(heads * m.v, h, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        m, heads = self.mla, self.heads
        q = self.wq_b(self.q_norm(self.wq_a(x))) if m.q_rank else self.wq(x)
        q_nope, q_pe = q.view(b, s, heads, m.qk_dim).split([m.nope, m.rope], dim=-1)
        latent, k_pe = self.wkv_a(x).split([m.kv_rank, m.rope], dim=-1)
        k_nope, v = self.wkv_b(self.kv_norm(latent)).view(b, s, heads, m.nope + m.v).split([m.nope, m.v], dim=-1)
        cos, sin = rope_tables(s, m.rope, self.theta, x.device)
        q_pe, k_pe = apply_rope(q_pe, cos, sin), apply_rope(k_pe.view(b, s, 1, m.rope), cos, sin)
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(b, s, heads, m.rope)], dim=-1)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, heads * m.v))


def window_mask(s: int, window: int, device: torch.device) -> Tensor:
    """[s, s] True where query i may attend key j: j <= i and, with a window W > 0, i - j < W."""
    i = torch.arange(s, device=device)[:, None]
    j = torch.arange(s, device=device)[None, :]
    allowed = j <= i
    return allowed & (i - j < window) if window else allowed


class SinkAttention(nn.Module):
    """GPT-OSS's attention of layer `layer` (this module's docstring): sliding-window in the even layers."""

    def __init__(self, cfg: MoeConfig, layer: int) -> None:
        super().__init__()
        b = cfg.base
        h, d, bias = b.hidden_size, head_width(cfg), cfg.attention_bias
        self.head_dim, self.theta = d, b.rope_theta
        self.groups = b.num_heads // b.num_kv_heads
        self.window = cfg.sliding_window if layer % 2 == 0 else 0
        self.wq = nn.Linear(h, b.num_heads * d, bias=bias)
        self.wk = nn.Linear(h, b.num_kv_heads * d, bias=bias)
        self.wv = nn.Linear(h, b.num_kv_heads * d, bias=bias)
        self.wo = nn.Linear(b.num_heads * d, h, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(b.num_heads)) if cfg.sinks else None

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        q, k, v = (proj(x).view(b, s, -1, d) for proj in (self.wq, self.wk, self.wv))
        cos, sin = rope_tables(s, d, self.theta, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, S, d]
        k, v = k.repeat_interleave(self.groups, dim=1), v.repeat_interleave(self.groups, dim=1)
        scores = (q @ k.transpose(-1, -2)).float() * d**-0.5
        scores = scores.masked_fill(~window_mask(s, self.window, x.device), float("-inf"))
        if self.sinks is not None:  # the sink's logit joins the denominator; its probability is dropped
            sink = self.sinks.float().view(1, -1, 1, 1).expand(b, -1, s, 1)
            probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1]
        else:
            probs = scores.softmax(-1)
        y = probs.to(v.dtype) @ v
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class Expert(nn.Module):
    """One SwiGLU expert (this module's docstring): biases and the clamped activation where the shape has them."""

    def __init__(self, hidden: int, ffn: int, bias: bool = False, clamped: bool = False) -> None:
        super().__init__()
        self.clamped = clamped
        self.w1 = nn.Linear(hidden, ffn, bias=bias)
        self.w2 = nn.Linear(ffn, hidden, bias=bias)
        self.w3 = nn.Linear(hidden, ffn, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.w1(x), self.w3(x)
        if not self.clamped:
            return self.w2(F.silu(gate) * up)
        gate = gate.clamp(max=SWIGLU_LIMIT)
        up = up.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
        return self.w2((up + 1) * gate * torch.sigmoid(SWIGLU_ALPHA * gate))


def attention_for(cfg: MoeConfig, layer: int) -> nn.Module | None:
    """The attention of `layer` where the shape is not Llama's (None: llama.py's grouped-query attention)."""
    if cfg.mla is not None:
        return LatentAttention(cfg)
    if cfg.head_dim or cfg.attention_bias or cfg.sinks or cfg.sliding_window:
        return SinkAttention(cfg, layer)
    return None


__all__ = ["Expert", "LatentAttention", "SinkAttention", "attention_for", "window_mask"]
