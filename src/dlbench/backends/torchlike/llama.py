"""A Llama-3-style decoder on a torch-shaped framework's ``nn`` (OneFlow's, #46), laid out like the torch backend's
llama.py, whose module and parameter names it keeps (``wte``, ``blocks.<i>.attention.wq`` ... ``norm``,
``lm_head``), so that torch's state dict loads into it unchanged.

Pre-norm blocks: RMSNorm (written out, in float32, or float64 in a float64 model); grouped-query attention with rotary positions (rotate-half
form, base ``rope_theta``), written out as softmax(QK^T / sqrt(d) + causal mask) V with each key/value head
repeated over its group of query heads (OneFlow 0.9 has no fused scaled-dot-product attention); a SwiGLU MLP
``w2(silu(w1 x) * w3 x)``; no biases, no dropout; a final RMSNorm and the LM head, tied to the token embedding (the
same parameter, as torch's) or not. Trainable parameters: exactly ``dlbench.cases.llama.param_count``.

Parameters are made uninitialised (``empty``) and initialised in one pass afterwards as torch's are (every matrix
normal(0, 0.02), the residual output projections ``wo``, ``w2`` / sqrt(2 x layers), norms 1). A model built only to
be counted (`count_decoder`, OneFlow having no meta device) has shapes only: each matrix a stride-0 view of one
element with the matrix's shape, so that counting Llama 2 70B makes no weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases.arch import LlamaConfig

RESIDUAL_OUTPUTS = (".wo.weight", ".w2.weight")


@dataclass(frozen=True)
class LlamaParts:
    """The family's modules on one framework: what moe.py builds its decoder from."""

    model: type
    feed_forward: type
    linear: type
    shapes_only: Callable[[], AbstractContextManager[None]]  # within it, matrices are made as shapes only


def init_parameters(ops: TorchOps, cfg: LlamaConfig, model: Any) -> None:
    """Every parameter's init (this module's docstring); a tied head is the embedding's parameter, drawn once."""
    with ops.lib.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                residual = name.endswith(RESIDUAL_OUTPUTS)
                ops.normal(p, cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if residual else 1.0))


def define(ops: TorchOps) -> LlamaParts:
    """The Llama family's modules on `ops`'s framework."""
    lib, nn, F = ops.lib, ops.nn, ops.F
    Module: Any = nn.Module
    made = {"shapes_only": False}

    @contextmanager
    def shapes_only() -> Iterator[None]:
        made["shapes_only"] = True
        try:
            yield
        finally:
            made["shapes_only"] = False

    def matrix(rows: int, cols: int) -> Any:
        """An uninitialised [rows, cols] parameter, or within `shapes_only` a view of one element of that shape."""
        return nn.Parameter(lib.zeros(1, 1).expand(rows, cols) if made["shapes_only"] else lib.empty(rows, cols))

    class Linear(Module):
        """A bias-free linear layer, y = x W^T, its weight [out, in] made uninitialised."""

        def __init__(self, fan_in: int, fan_out: int) -> None:
            super().__init__()
            self.weight = matrix(fan_out, fan_in)

        def forward(self, x: Any) -> Any:
            return F.linear(x, self.weight)

    class Embedding(Module):
        """Rows of a [vocab, width] table, made uninitialised."""

        def __init__(self, rows: int, width: int) -> None:
            super().__init__()
            self.weight = matrix(rows, width)

        def forward(self, ids: Any) -> Any:
            return F.embedding(ids, self.weight)

    class RMSNorm(Module):
        """x / sqrt(mean(x^2) + eps) x weight, computed in float32."""

        def __init__(self, width: int, eps: float) -> None:
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(lib.ones(width))

        def forward(self, x: Any) -> Any:
            h = wide(x)
            h = h * lib.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * wide(self.weight)).to(x.dtype)

    def wide(x: Any) -> Any:
        """x in float32, or in float64 where it is (the same-model check's float64 model)."""
        return x if x.dtype == lib.float64 else x.float()

    def rope(x: Any, theta: float) -> Any:
        """Rotate [B, S, heads, d] by position x theta^(-2i/d) (channel i pairs with channel i + d/2)."""
        s, d = x.shape[1], x.shape[-1]
        inv = 1.0 / theta ** (lib.arange(0, d, 2, device=x.device).float() / d)  # float32 tables, as torch's
        angles = lib.arange(s, device=x.device).float()[:, None] * inv[None, :]
        both = lib.cat([angles, angles], -1)
        cos, sin = both.cos()[None, :, None, :], both.sin()[None, :, None, :]
        first, second = x.chunk(2, -1)
        turned = lib.cat([-second, first], -1)
        return (wide(x) * cos + wide(turned) * sin).to(x.dtype)

    class Attention(Module):
        """Causal grouped-query self-attention with rotary positions."""

        def __init__(self, cfg: LlamaConfig) -> None:
            super().__init__()
            h, d = cfg.hidden_size, cfg.head_dim
            self.head_dim, self.theta, self.group = d, cfg.rope_theta, cfg.num_heads // cfg.num_kv_heads
            self.wq, self.wk = Linear(h, cfg.num_heads * d), Linear(h, cfg.num_kv_heads * d)
            self.wv, self.wo = Linear(h, cfg.num_kv_heads * d), Linear(cfg.num_heads * d, h)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            d = self.head_dim
            q = rope(self.wq(x).view(b, s, -1, d), self.theta).transpose(1, 2)  # [B, heads, S, d]
            k = rope(self.wk(x).view(b, s, -1, d), self.theta).transpose(1, 2)
            v = self.wv(x).view(b, s, -1, d).transpose(1, 2)
            if self.group > 1:  # each key/value head serves its group of query heads
                k, v = k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1)
            scores = lib.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            future = lib.ones(s, s, device=x.device).triu(1).bool()
            scores = scores.masked_fill(future, float("-inf"))
            y = lib.matmul(F.softmax(wide(scores), dim=-1).to(v.dtype), v)
            return self.wo(y.transpose(1, 2).reshape(b, s, -1))

    class FeedForward(Module):
        """SwiGLU: w2(silu(w1 x) * w3 x)."""

        def __init__(self, cfg: LlamaConfig, width: int | None = None) -> None:
            super().__init__()
            h, f = cfg.hidden_size, width or cfg.ffn_size
            self.w1, self.w2, self.w3 = Linear(h, f), Linear(f, h), Linear(h, f)

        def forward(self, x: Any) -> Any:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class LlamaBlock(Module):
        """x + attention(RMSNorm(x)), then x + MLP(RMSNorm(x))."""

        def __init__(self, cfg: LlamaConfig, feed_forward: Any = None) -> None:
            super().__init__()
            self.attention_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
            self.attention = Attention(cfg)
            self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
            self.feed_forward = feed_forward if feed_forward is not None else FeedForward(cfg)

        def forward(self, x: Any) -> Any:
            x = x + self.attention(self.attention_norm(x))
            return x + self.feed_forward(self.ffn_norm(x))

    class LlamaModel(Module):
        """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits
        [B, S, V]. `feed_forward`, where set, makes each block's MLP (moe.py's experts); `init=False` leaves the
        weights unwritten (a model built to be counted)."""

        def __init__(self, cfg: LlamaConfig, feed_forward: Callable[[], Any] | None = None, init: bool = True):
            super().__init__()
            self.cfg = cfg
            self.wte = Embedding(cfg.vocab_size, cfg.hidden_size)
            self.blocks = nn.ModuleList(
                [LlamaBlock(cfg, feed_forward() if feed_forward else None) for _ in range(cfg.num_layers)]
            )
            self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size)
            if cfg.tied_embeddings:  # one parameter, in the state dict under both names as torch's
                self.lm_head.weight = self.wte.weight
            if init:
                init_parameters(ops, cfg, self)

        def forward(self, ids: Any) -> Any:
            x = self.wte(ids)
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.norm(x))

    return LlamaParts(LlamaModel, FeedForward, Linear, shapes_only)


def count_decoder(ops: TorchOps, parts: LlamaParts, build: Callable[[], Any]) -> int:
    """A decoder's trainable parameters without making its weights: `build()` makes it uninitialised, here with
    its matrices as shapes only (`LlamaParts.shapes_only`); tied parameters once."""
    with parts.shapes_only():
        return ops.count(build())


__all__ = ["LlamaParts", "count_decoder", "define", "init_parameters"]
