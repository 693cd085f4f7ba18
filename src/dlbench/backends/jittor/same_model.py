"""The Jittor models' canonical weights (`dlbench check same-model`): each canonical tensor's name in the model's
`state_dict`, and the model's forward passes.

`jittor_name` is plain Python over names: jittor.models' ResNet keeps torchvision's names (``conv1``/``bn1``, the
stages ``layer1`` to ``layer4``), BERT (models.py) the canonical ones but for the embeddings' (``word_embeddings``,
``embed_norm``). Jittor's layouts are torch's (convolutions OIHW, Linear [out, in], BatchNorm's ``running_mean`` and
``running_var``), so no tensor is transposed. The float64 model is the backend's with every Var cast to float64
(Jittor's CPU kernels are compiled for the dtype they meet; its flag ``auto_convert_64_to_32``, on by default,
would turn the float64 weights and batch back into float32), and the zoo ResNet's float32 cast of its pooled
features is left out of it.
"""

from __future__ import annotations

from collections.abc import Mapping

import jittor as jt
import numpy as np

from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.backends.jittor.step import JittorTrainer
from dlbench.backends.same_model import (
    Arrays,
    WeightMap,
    as_model_input,
    named_outputs,
    torchlike_inputs,
    torchvision_resnet_module,
)
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import BertConfig, ResNetArch
from dlbench.data.synthetic import BERT_KEYS
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

_BERT_EMBEDDINGS = {"embeddings.layer_norm": "embed_norm"}


def jittor_name(case: Case, t: Tensor) -> str:
    """The model's state_dict key holding a canonical tensor."""
    module, leaf = t.name.rsplit(".", 1) if "." in t.name else ("", t.name)
    if isinstance(case.arch, ResNetArch):
        return f"{torchvision_resnet_module(module)}.{leaf}"
    if isinstance(case.arch, BertConfig):
        if module.startswith("embeddings."):
            module = _BERT_EMBEDDINGS.get(module, module.removeprefix("embeddings."))
        return f"{module}.{leaf}" if module else leaf
    raise Unsupported(f"the jittor weight map does not describe {case.name} yet (backends/jittor/same_model.py)")


def _model(trainer: Trainer) -> jt.Module:
    assert isinstance(trainer, JittorTrainer), type(trainer)
    return trainer.model


def _dtype(model: jt.Module) -> str:
    return str(model.parameters()[0].dtype)


def _without_float32_cast(model: jt.Module) -> None:
    """jittor.models' ResNet casts its pooled features to float32 (``float_auto``) before the fc: nothing in the
    float32 model the benchmark runs, a rounding of every feature in a float64 one (its logits 1.2e-6 from torch's,
    measured). The float64 model runs the same layers without that cast."""

    def forward(x: jt.Var) -> jt.Var:
        for layer in (model.conv1, model.bn1, model.relu, model.maxpool, model.layer1, model.layer2, model.layer3):
            x = layer(x)
        x = model.avgpool(model.layer4(x))
        return model.fc(jt.reshape(x, (x.shape[0], -1)))

    model._forward_impl = forward


class JittorWeights(WeightMap):
    """The model's state_dict under Jittor's names; torch's layouts."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        model = _model(trainer)
        state = model.state_dict()
        named = {jittor_name(case, t): t for t in tensors(case)}
        left = sorted(set(state) - set(named))
        if left:
            raise ValueError(f"no canonical tensor sets jittor's {', '.join(left[:3])}")
        for key, t in named.items():
            target = state[key]
            if tuple(target.shape) != weights[t.name].shape:
                raise ValueError(
                    f"{t.name} -> {key}: jittor has {tuple(target.shape)}, canonical {weights[t.name].shape}"
                )
            target.assign(jt.array(weights[t.name].astype(str(target.dtype))))
        jt.sync_all()

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = _model(trainer).state_dict()
        return {t.name: np.array(state[jittor_name(case, t)].numpy()) for t in tensors(case)}

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's trainer with every Var of its model (running statistics too) cast to float64 in place, so
        that the optimizer keeps the same Vars. Jittor turns a float64 NumPy array into a float32 Var unless its flag
        `auto_convert_64_to_32` is off: it is turned off here (this process only)."""
        jt.flags.auto_convert_64_to_32 = 0
        trainer = backend.build(spec, case, RankContext())
        model = _model(trainer)
        for v in model.state_dict().values():
            v.assign(v.float64())
        if isinstance(case.arch, ResNetArch):
            _without_float32_cast(model)
        jt.sync_all()
        return trainer

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        fed = self.feed(trainer, case, batch)
        named = dict(zip(BERT_KEYS, fed, strict=False)) if isinstance(case.arch, BertConfig) else {"images": fed[0]}
        model.train() if train else model.eval()
        try:
            with jt.no_grad():
                out = model(*torchlike_inputs(case, named))
                parts = out if isinstance(out, (tuple, list)) else (out,)
                arrays = tuple(np.array(p.numpy()) for p in parts)
        finally:
            model.train()
        return named_outputs(case, arrays)

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> list[jt.Var]:
        """The batch as JittorTrainer takes it: [images, labels] or BERT's arrays in BERT_KEYS order (integers
        int32; images in the model's dtype)."""
        fed = as_model_input(batch, _dtype(_model(trainer)))
        keys = BERT_KEYS if isinstance(case.arch, BertConfig) else ("images", "labels")
        return [jt.array(fed[k].astype(np.int32) if np.issubdtype(fed[k].dtype, np.integer) else fed[k]) for k in keys]


WEIGHTS = JittorWeights()
