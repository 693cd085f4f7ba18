"""The framework primitives torch-shaped models are written in, as torch and OneFlow spell them.

`lib` is the framework's top module (``torch`` or ``oneflow``). A backend whose spelling differs subclasses
`TorchOps` and overrides those methods; a model never calls its framework except through these.
"""

from __future__ import annotations

import math
from typing import Any


class TorchOps:
    """Layers and functions for torch (``TorchOps(torch)``) and OneFlow (``TorchOps(oneflow)``)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.nn = lib.nn
        self.F = lib.nn.functional
        self.init = lib.nn.init

    # --------------------------------------------------------------------------------------------- layers

    def relu_layer(self) -> Any:
        return self.nn.ReLU(inplace=True)

    def adaptive_pool_layer(self, size: int) -> Any:
        return self.nn.AdaptiveAvgPool2d(size)

    def module_list(self, modules: list[Any]) -> Any:
        return self.nn.ModuleList(modules)

    def embedding(self, rows: int, width: int, padding_idx: int | None = None) -> Any:
        return self.nn.Embedding(rows, width, padding_idx=padding_idx)

    def zeros_parameter(self, n: int) -> Any:
        return self.nn.Parameter(self.lib.zeros(n))

    # ------------------------------------------------------------------------------------------ functions

    def relu(self, x: Any) -> Any:
        return self.F.relu(x, inplace=True)

    def cat(self, xs: list[Any]) -> Any:
        """Concatenated along the channel axis (1)."""
        return self.lib.cat(xs, 1)

    def flatten(self, x: Any) -> Any:
        return self.lib.flatten(x, 1)

    def avg_pool(self, x: Any, kernel: int, stride: int, padding: int = 0) -> Any:
        """Average pooling with zero padding counted in the divisor (torch's default)."""
        return self.F.avg_pool2d(x, kernel, stride=stride, padding=padding)

    def max_pool(self, x: Any, kernel: int, stride: int) -> Any:
        return self.F.max_pool2d(x, kernel, stride=stride)

    def adaptive_pool(self, x: Any, size: int) -> Any:
        return self.F.adaptive_avg_pool2d(x, size)

    def gelu(self, x: Any) -> Any:
        return self.F.gelu(x)

    def tanh(self, x: Any) -> Any:
        return self.lib.tanh(x)

    # ------------------------------------------------------------------------------------------------ init

    def kaiming_normal(self, w: Any) -> None:
        """He-normal, fan-out, for a ReLU network."""
        self.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")

    def normal(self, w: Any, std: float) -> None:
        self.init.normal_(w, 0.0, std)

    def ones(self, w: Any) -> None:
        self.init.ones_(w)

    def zeros(self, w: Any) -> None:
        self.init.zeros_(w)

    def zero_row(self, w: Any, row: int) -> None:
        with self.lib.no_grad():
            w[row].zero_()

    # ----------------------------------------------------------------------------------------- transformer

    def split_heads(self, qkv: Any, heads: int) -> tuple[Any, Any, Any]:
        """[B, S, 3H] fused projections -> q, k, v, each [B, heads, S, H / heads]."""
        b, s, _ = qkv.shape
        t = qkv.view(b, s, 3, heads, -1).permute(2, 0, 3, 1, 4)
        return t[0], t[1], t[2]

    def merge_heads(self, ctx: Any) -> Any:
        """[B, heads, S, d] -> [B, S, heads x d]."""
        b, n, s, d = ctx.shape
        return ctx.transpose(1, 2).reshape(b, s, n * d)

    def attention_mask(self, attention_mask: Any) -> Any:
        """[B, S] 1 = attend -> what `attention` takes: an additive bias, [B, 1, 1, S], -10000 where masked."""
        return (1.0 - attention_mask.to(self.lib.float32))[:, None, None, :] * -10000.0

    def attention(self, q: Any, k: Any, v: Any, mask: Any, dropout: Any) -> Any:
        """softmax(QK^T / sqrt(d) + mask) V (no mask where it is None), `dropout` (a module) on the weights."""
        scores = self.lib.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        if mask is not None:
            scores = scores + mask
        return self.lib.matmul(dropout(self.F.softmax(scores, dim=-1)), v)

    def position_rows(self, embedding: Any, length: int) -> Any:
        """Rows 0..length-1 of a position embedding, [1, length, H]."""
        return embedding(self.lib.arange(length, device=embedding.weight.device))[None]

    def gather_positions(self, x: Any, positions: Any) -> Any:
        """x [B, S, H] at positions [B, P] -> [B, P, H]."""
        return self.lib.gather(x, 1, positions[:, :, None].expand(-1, -1, x.shape[-1]))

    def tied_logits(self, h: Any, weight: Any, bias: Any) -> Any:
        """h @ weight^T + bias (the MLM decoder tied to the word embeddings)."""
        return self.F.linear(h, weight, bias)

    # ----------------------------------------------------------------------------------------------- losses

    def xent(self, logits: Any, labels: Any) -> Any:
        """Mean softmax cross-entropy over every prediction, computed in float32."""
        return self.F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))

    def xent_each(self, logits: Any, labels: Any) -> Any:
        """Cross-entropy of each prediction, float32, flattened."""
        return self.F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), reduction="none")

    def as_float(self, x: Any) -> Any:
        return x.float()

    def count(self, model: Any) -> int:
        """Trainable parameters, tied ones once (``parameters()`` yields a shared tensor once)."""
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
