"""The benchmark's models in MegEngine, and their losses: the torch-shaped descriptions in
`dlbench.backends.torchlike` (the torch backend's own) built on ``megengine.module``, with the primitives MegEngine
spells differently below. Each model has exactly the case's reference trainable-parameter count
(``dlbench.cases``). MegEngine's BatchNorm momentum 0.9 is torch's 0.1 (it weighs the running statistic).

Where MegEngine differs: no ``padding_idx`` (the padding row is zeroed at init only), average pooling counts
padding only with ``mode="average"``, the masked-position gather is a one-hot matmul (jit.trace takes it with
static shapes, where advanced indexing does not; P x S x H per sample, well under 1% of BERT's work), and the
adaptive pool from a map smaller than its output (small test inputs) runs as two matmuls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import megengine as mge
import megengine.functional as F
import megengine.module as nn
import numpy as np
from megengine import Parameter, Tensor

from dlbench.backends.context import BuildContext
from dlbench.backends.torchlike import bert, cnn, models
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case


def _pool_matrix(size_in: int, size_out: int) -> np.ndarray:
    """[out, in] weights of torch's adaptive average pooling along one axis: output i averages inputs
    floor(i * in / out) to ceil((i + 1) * in / out)."""
    m = np.zeros((size_out, size_in), np.float32)
    for i in range(size_out):
        lo, hi = (i * size_in) // size_out, -((-(i + 1) * size_in) // size_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool(x: Tensor, size: int) -> Tensor:
    """torch's adaptive_avg_pool2d to size x size, also from a smaller map: MegEngine's own divides by in // out,
    which is 0 there (a SIGFPE), so that case runs as two matmuls with the pooling weights."""
    b, c, h, w = (int(d) for d in x.shape)
    if h >= size and w >= size:
        return F.adaptive_avg_pool2d(x, (size, size))
    rows = Tensor(_pool_matrix(h, size).T)  # [h, size]
    cols = Tensor(_pool_matrix(w, size).T)  # [w, size]
    y = F.matmul(x.reshape(b * c, h, w), cols)  # [bc, h, size]
    y = F.matmul(y.transpose(0, 2, 1), rows)  # [bc, size (w), size (h)]
    return y.transpose(0, 2, 1).reshape(b, c, size, size)


class AdaptiveAvgPool(nn.Module):
    """`adaptive_avg_pool` as a module."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool(x, self.size)


class Ops(TorchOps):
    """MegEngine's spelling of torchlike's primitives (``lib`` is megengine; ``nn`` is megengine.module)."""

    def __init__(self) -> None:
        self.lib, self.nn, self.F, self.init = mge, nn, F, nn.init

    def relu_layer(self) -> nn.Module:
        return nn.ReLU()

    def adaptive_pool_layer(self, size: int) -> nn.Module:
        return AdaptiveAvgPool(size)

    def module_list(self, modules: list[Any]) -> list[Any]:
        return modules

    def embedding(self, rows: int, width: int, padding_idx: int | None = None) -> nn.Module:
        return nn.Embedding(rows, width)

    def zeros_parameter(self, n: int) -> Parameter:
        return Parameter(np.zeros(n, np.float32))

    def relu(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def cat(self, xs: list[Tensor]) -> Tensor:
        return F.concat(xs, axis=1)

    def flatten(self, x: Tensor) -> Tensor:
        return F.flatten(x, 1)

    def avg_pool(self, x: Tensor, kernel: int, stride: int, padding: int = 0) -> Tensor:
        return F.avg_pool2d(x, kernel, stride=stride, padding=padding, mode="average")  # padding counted, as torch

    def adaptive_pool(self, x: Tensor, size: int) -> Tensor:
        return adaptive_avg_pool(x, size)

    def tanh(self, x: Tensor) -> Tensor:
        return F.tanh(x)

    def kaiming_normal(self, w: Tensor) -> None:
        nn.init.msra_normal_(w, mode="fan_out", nonlinearity="relu")

    def zero_row(self, w: Tensor, row: int) -> None:
        w[row] = 0.0

    def split_heads(self, qkv: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
        b, s, h3 = qkv.shape
        t = qkv.reshape(b, s, 3, heads, h3 // (3 * heads)).transpose(2, 0, 3, 1, 4)
        return t[0], t[1], t[2]

    def merge_heads(self, ctx: Tensor) -> Tensor:
        b, n, s, d = ctx.shape
        return ctx.transpose(0, 2, 1, 3).reshape(b, s, n * d)

    def attention_mask(self, attention_mask: Tensor) -> Tensor:
        return F.expand_dims((1.0 - attention_mask.astype("float32")) * -10000.0, (1, 2))

    def attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout: nn.Module) -> Tensor:
        scores = F.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(q.shape[-1])) + mask
        return F.matmul(dropout(F.softmax(scores, axis=-1)), v)

    def position_rows(self, embedding: nn.Module, length: int) -> Tensor:
        return F.expand_dims(embedding.weight[:length], 0)  # rows 0..S-1 (traces with symbolic S)

    def gather_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        return F.matmul(F.one_hot(positions, x.shape[1]).astype("float32"), x)

    def tied_logits(self, h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return F.matmul(h, weight, transpose_b=True) + bias

    def xent(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    def xent_each(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")

    def as_float(self, x: Tensor) -> Tensor:
        return x.astype("float32")

    def count(self, model: nn.Module) -> int:
        unique = {id(p): p for p in model.parameters()}
        return sum(int(np.prod(p.shape)) for p in unique.values())


OPS = Ops()
CNN = cnn.define(OPS)

# The model table: case name -> builder reading the case's architecture. The only place a case is named.
# fmt: off
MODELS: dict[str, Callable[[Case, BuildContext], nn.Module]] = {
    "resnet50": CNN.resnet, "resnet152": CNN.resnet, "vgg16": CNN.vgg, "alexnet": CNN.alexnet,
    "inception_v3": CNN.inception_v3, "bert_base": bert.builder(OPS),
}
# fmt: on


build_model, count_trainable, train_loss = models.functions(OPS, MODELS)

__all__ = ["MODELS", "build_model", "count_trainable", "train_loss"]
