"""The paddle models' canonical weights (`dlbench check same-model`): each canonical tensor's name in the model's
`state_dict`, and its layout.

`paddle_name` is plain Python over names: paddle.vision's ResNet calls the stem ``conv1``/``bn1`` and the stages
``layer1`` to ``layer4``, its AlexNet ``_conv1`` ... ``_fc8``; VGG, BERT (bert.py) and Wide & Deep keep the
canonical names. BatchNorm's running statistics are ``_mean``
and ``_variance``; paddle's Linear keeps its weight [in, out]; convolutions are OIHW as in torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle

from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.backends.paddle.step import PaddleTrainer
from dlbench.backends.same_model import (
    Arrays,
    WeightMap,
    as_model_input,
    modules,
    named_outputs,
    torchvision_resnet_module,
    transposed,
)
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import AlexNetArch, BertConfig, InceptionArch, ResNetArch, VggArch, WideDeepArch
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

_RUNNING = {"running_mean": "_mean", "running_var": "_variance"}


def _alexnet_module(case: Case, module: str) -> str:
    """paddle.vision's AlexNet: convs _conv1 to _conv5 (a pooled one's conv inside it: _conv1._conv), fcs _fc6 to
    _fc8."""
    convs = modules(case, "features.", "conv")
    if module in convs:
        k = convs.index(module)
        pooled = isinstance(case.arch, AlexNetArch) and case.arch.convs[k].pool_after
        return f"_conv{k + 1}._conv" if pooled else f"_conv{k + 1}"
    return f"_fc{modules(case, 'classifier.', 'linear').index(module) + len(convs) + 1}"


# paddle.vision's Inception v3: the stem convs by name, the blocks in one list (A, A, A, B, C x 4 in the stem,
# then D, E, E), each BasicConv a ConvNormActivation (.0 the conv, .1 the batch norm).
_INCEPTION_STEM = {"0": "conv_1a_3x3", "1": "conv_2a_3x3", "2": "conv_2b_3x3", "4": "conv_3b_1x1", "5": "conv_4a_3x3"}


def _inception_branch(parts: list[str]) -> str:
    """A block's branch: 'b5x5', '1' -> 'branch5x5_2' (a chain's k-th conv), 'b1x1' -> 'branch1x1', 'bpool' ->
    'branch_pool_conv'; E's 'b3x3dbl_1', k -> 'branch3x3dbl_{k+1}'."""
    name, rest = parts[0], parts[1:]
    if name == "bpool":
        return "branch_pool_conv"
    if name == "b3x3dbl_1" and rest:
        return f"branch3x3dbl_{int(rest[0]) + 1}"
    return f"branch{name[1:]}_{int(rest[0]) + 1}" if rest else f"branch{name[1:]}"


def _inception_module(module: str) -> str:
    """A canonical Inception module ('stem.7.b5x5.1.conv', 'aux.conv0.bn', 'fc') as paddle.vision's."""
    if module in ("fc", "aux.fc"):
        return module
    *path, layer = module.split(".")
    layer = {"conv": "0", "bn": "1"}[layer]
    if path[0] == "aux":
        return f"aux.{path[1]}.{layer}"
    if path[0] == "stem" and path[1] in _INCEPTION_STEM:
        return f"inception_stem.{_INCEPTION_STEM[path[1]]}.{layer}"
    block = int(path[1]) - 7 if path[0] == "stem" else int(path[1]) + 8
    return f"inception_block_list.{block}.{_inception_branch(path[2:])}.{layer}"


def paddle_name(case: Case, t: Tensor) -> str:
    """The model's state_dict key holding a canonical tensor."""
    module, leaf = t.name.rsplit(".", 1) if "." in t.name else ("", t.name)
    leaf = _RUNNING.get(t.role, leaf)
    if isinstance(case.arch, (BertConfig, VggArch, WideDeepArch)):  # paddle's names are the canonical ones
        return f"{module}.{leaf}" if module else leaf
    if isinstance(case.arch, AlexNetArch):
        return f"{_alexnet_module(case, module)}.{leaf}"
    if isinstance(case.arch, InceptionArch):
        return f"{_inception_module(module)}.{leaf}"
    if isinstance(case.arch, ResNetArch):
        return f"{torchvision_resnet_module(module)}.{leaf}"
    raise Unsupported(f"the paddle weight map does not describe {case.name} yet (backends/paddle/same_model.py)")


def _model(trainer: Trainer) -> paddle.nn.Layer:
    assert isinstance(trainer, PaddleTrainer), type(trainer)
    return trainer.model


class PaddleWeights(WeightMap):
    """The model's state_dict, Linear weights transposed."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        state = _model(trainer).state_dict()
        set_names = set()
        for t in tensors(case):
            key = paddle_name(case, t)
            value = transposed(weights[t.name]) if t.role == "linear" else weights[t.name]
            if tuple(state[key].shape) != value.shape:
                raise ValueError(f"{t.name} -> {key}: paddle has {tuple(state[key].shape)}, canonical {value.shape}")
            state[key].set_value(value.astype(_numpy_dtype(state[key])))
            set_names.add(key)
        left = [k for k in state if k not in set_names]
        if left:
            raise ValueError(f"no canonical tensor sets {', '.join(left[:3])}")

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = _model(trainer).state_dict()
        out: Arrays = {}
        for t in tensors(case):
            value = state[paddle_name(case, t)].numpy()
            out[t.name] = transposed(value) if t.role == "linear" else value
        return out

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's trainer with every layer created in float64 (paddle's default dtype, this process only)."""
        paddle.set_default_dtype("float64")
        return backend.build(spec, case, RankContext())

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        fed = self.feed(trainer, case, batch)
        model.train() if train else model.eval()
        try:
            with paddle.no_grad():
                if isinstance(case.arch, BertConfig):
                    keys: tuple[str, ...] = ("input_ids", "token_type_ids", "attention_mask", "mlm_positions")
                elif isinstance(case.arch, WideDeepArch):
                    keys = ("dense", "deep_ids", "wide_ids")
                else:
                    keys = ("images",)
                out = model(*(fed[k] for k in keys))
        finally:
            model.train()
        parts = out if isinstance(out, (list, tuple)) else (out,)
        return named_outputs(case, tuple(p.numpy() for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, paddle.Tensor]:
        return {k: paddle.to_tensor(v) for k, v in as_model_input(batch, paddle.get_default_dtype()).items()}


def _numpy_dtype(t: paddle.Tensor) -> str:
    return "float64" if t.dtype == paddle.float64 else "float32"


WEIGHTS = PaddleWeights()
