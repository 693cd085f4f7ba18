"""The benchmark's models in OneFlow, and their losses: the torch-shaped descriptions in
`dlbench.backends.torchlike` (the torch backend's own) built on ``oneflow.nn``, whose API mirrors torch's.

OneFlow 0.9 has no fused scaled-dot-product attention, so BERT's attention is written out (`TorchOps.attention`),
and so is the Llama family's (torchlike/llama.py; the MoE family's experts in torchlike/moe.py, #46). Each model has
exactly the case's reference trainable-parameter count (``dlbench.cases``); a decoder is counted without making its
weights (`count_decoder`: OneFlow has no meta device).
"""

from __future__ import annotations

from collections.abc import Callable

import oneflow as flow
from oneflow import nn

from dlbench.backends.context import BuildContext
from dlbench.backends.decoder import LLAMA_MEMBERS, MOE_MEMBERS
from dlbench.backends.torchlike import bert, cnn, llama, models, moe
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case
from dlbench.cases.arch import LlamaConfig, MoeConfig
from dlbench.cases.llama import llama_arch
from dlbench.cases.moe import moe_arch

OPS = TorchOps(flow)
CNN = cnn.define(OPS)
LLAMA = llama.define(OPS)
MoeModel = moe.define(OPS, LLAMA)


def decoder(case: Case, init: bool = True) -> nn.Module:
    """The case's Llama or MoE decoder; `init=False` leaves its weights unwritten."""
    if isinstance(case.arch, MoeConfig):
        return MoeModel(moe_arch(case), init=init)
    return LLAMA.model(llama_arch(case), init=init)


def count_params(case: Case) -> int:
    """The case's trainable parameters; a decoder's counted without making its weights (`llama.count_decoder`)."""
    if isinstance(case.arch, LlamaConfig | MoeConfig):
        return llama.count_decoder(OPS, LLAMA, lambda: decoder(case, init=False))
    return count_trainable(build_model(case))


# The model table: case name -> builder reading the case's architecture. The only place a case is named.
# fmt: off
MODELS: dict[str, Callable[[Case, BuildContext], nn.Module]] = {
    "resnet50": CNN.resnet, "resnet152": CNN.resnet, "vgg16": CNN.vgg, "alexnet": CNN.alexnet,
    "inception_v3": CNN.inception_v3, "bert_base": bert.builder(OPS),
    **dict.fromkeys(LLAMA_MEMBERS + MOE_MEMBERS, lambda c, ctx: decoder(c)),
}
# fmt: on


build_model, count_trainable, train_loss = models.functions(OPS, MODELS)

__all__ = ["MODELS", "MoeModel", "build_model", "count_params", "count_trainable", "decoder", "train_loss"]
