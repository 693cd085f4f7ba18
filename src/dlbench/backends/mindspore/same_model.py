"""The MindSpore models' canonical weights (`dlbench check same-model`): each canonical tensor's name in the
model's ``parameters_and_names`` (models.py), and its layout.

`mindspore_name` is plain Python over names. MindSpore's layouts are torch's (convolutions OIHW, a Dense weight
[out, in], BERT's fused QKV in (q, k, v) x heads order), so no value is transposed; its names differ: a BatchNorm or
LayerNorm keeps ``gamma``/``beta`` and, for BatchNorm, ``moving_mean``/``moving_variance``; an Embedding its
``embedding_table``. The ResNet is one SequentialCell ``features`` (stem conv 0, batch norm 1, then the bottlenecks
from index 4, each a ``body`` of conv/BN/ReLU triples and a ``down`` projection); VGG and AlexNet are one
SequentialCell holding torchvision's ``features`` cells at their indices, then the pool, the flatten and the
``classifier`` cells; BERT (models.BertForPretraining) names its cells as the canonical names do, the embeddings'
flattened. Inception v3 is not described yet. MindSpore's convolutions (Conv2D) take no
float64, so its float32 run is judged (marked), as MegEngine's.
"""

from __future__ import annotations

from collections.abc import Mapping

import mindspore as ms
import numpy as np
from mindspore import nn

from dlbench.backends.base import Trainer, Unsupported
from dlbench.backends.mindspore.data import as_tensors, batch_keys
from dlbench.backends.mindspore.step import MindsporeTrainer
from dlbench.backends.same_model import Arrays, WeightMap, named_outputs, torchlike_inputs
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, ResNetArch, VggArch

_NORM = {"norm_weight": "gamma", "residual_norm_weight": "gamma", "norm_bias": "beta"}
_RUNNING = {"running_mean": "moving_mean", "running_var": "moving_variance"}
_BERT = {
    "embeddings.word_embeddings": "word_embeddings",
    "embeddings.position_embeddings": "position_embeddings",
    "embeddings.token_type_embeddings": "token_type_embeddings",
    "embeddings.layer_norm": "embed_norm",
}


def _resnet_module(arch: ResNetArch, module: str) -> str:
    """'stem.0' -> 'features.0'; 'stages.1.0.conv2' -> 'features.7.body.3'; '...downsample.1' -> '...down.1'."""
    if module == "fc":
        return module
    if module.startswith("stem."):
        return f"features.{module.split('.')[1]}"
    _, stage, block, layer, *rest = module.split(".")
    index = 4 + sum(arch.stages[: int(stage)]) + int(block)
    if layer == "downsample":
        return f"features.{index}.down.{rest[0]}"
    k = int(layer[-1]) - 1  # conv1/bn1 -> 0, conv2/bn2 -> 1, conv3/bn3 -> 2
    return f"features.{index}.body.{3 * k + (layer.startswith('bn'))}"


def _feature_cells(arch: VggArch | AlexNetArch) -> int:
    """The cells before the adaptive pool: a conv and its ReLU per conv, a max-pool where marked (torchvision's)."""
    if isinstance(arch, VggArch):
        return sum(1 if v == POOL else 2 for v in arch.layers)
    return sum(3 if c.pool_after else 2 for c in arch.convs)


def _sequential_module(arch: VggArch | AlexNetArch, module: str) -> str:
    """VGG and AlexNet: torchvision's 'features.N' is cell N of the one SequentialCell, 'classifier.M' cell M after
    the features, the adaptive pool and the flatten."""
    part, index = module.split(".")
    return index if part == "features" else str(int(index) + _feature_cells(arch) + 2)


def mindspore_name(case: Case, t: Tensor) -> str:
    """The path (``parameters_and_names``) of the model's parameter holding a canonical tensor."""
    module, leaf = t.name.rsplit(".", 1) if "." in t.name else ("", t.name)
    leaf = _NORM.get(t.role, _RUNNING.get(t.role, leaf))
    if t.role == "embedding":
        leaf = "embedding_table"
    if isinstance(case.arch, ResNetArch):
        return f"{_resnet_module(case.arch, module)}.{leaf}"
    if isinstance(case.arch, (VggArch, AlexNetArch)):
        return f"{_sequential_module(case.arch, module)}.{leaf}"
    if isinstance(case.arch, BertConfig):
        return f"{_BERT.get(module, module)}.{leaf}" if module else leaf
    raise Unsupported(f"the MindSpore weight map does not describe {case.name} yet (backends/mindspore/same_model.py)")


def _model(trainer: Trainer) -> nn.Cell:
    assert isinstance(trainer, MindsporeTrainer), type(trainer)
    return trainer.net.model


def _params(trainer: Trainer) -> dict[str, ms.Parameter]:
    return dict(_model(trainer).parameters_and_names())


class MindsporeWeights(WeightMap):
    """The model's parameters by path, set and read in torch's layouts."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        params = _params(trainer)
        set_names = set()
        for t in tensors(case):
            key = mindspore_name(case, t)
            value = weights[t.name]
            if tuple(params[key].shape) != value.shape:
                raise ValueError(
                    f"{t.name} -> {key}: MindSpore has {tuple(params[key].shape)}, canonical {value.shape}"
                )
            params[key].set_data(ms.Tensor(value.astype(np.float32)))
            set_names.add(key)
        left = [k for k in params if k not in set_names]
        if left:
            raise ValueError(f"no canonical tensor sets {', '.join(left[:3])}")

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        params = _params(trainer)
        return {t.name: params[mindspore_name(case, t)].asnumpy() for t in tensors(case)}

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        fed = dict(zip(batch_keys(case), self.feed(trainer, case, batch), strict=True))
        model.set_train(train)
        try:
            out = model(*torchlike_inputs(case, fed))
        finally:
            model.set_train(True)
        parts = out if isinstance(out, tuple) else (out,)
        return named_outputs(case, tuple(p.asnumpy() for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> list[ms.Tensor]:
        return as_tensors(case, dict(batch))


WEIGHTS = MindsporeWeights()
