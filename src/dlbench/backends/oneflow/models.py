"""The benchmark's models in OneFlow, and their losses: the torch-shaped descriptions in
`dlbench.backends.torchlike` (the torch backend's own) built on ``oneflow.nn``, whose API mirrors torch's.

OneFlow 0.9 has no fused scaled-dot-product attention, so BERT's attention is written out (`TorchOps.attention`).
Each model has exactly the case's reference trainable-parameter count (``dlbench.cases``).
"""

from __future__ import annotations

from collections.abc import Callable

import oneflow as flow
from oneflow import nn

from dlbench.backends.context import BuildContext
from dlbench.backends.torchlike import bert, cnn, models
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case

OPS = TorchOps(flow)
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
