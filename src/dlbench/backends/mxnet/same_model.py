"""The MXNet (Gluon) models' canonical weights (`dlbench check same-model`): each canonical tensor's structural
name in the model (Gluon's ``_collect_params_with_prefix``, the names ``save_parameters`` writes), and the forward
passes.

`mxnet_name` is plain Python over names: the ResNet (models.py) is one ``features`` sequence (stem conv and
BatchNorm at 0 and 1, the bottlenecks from 4 on, each a ``body`` of conv, BatchNorm and ReLU three times and a
``downsample``) and an ``output`` Dense; BERT keeps the canonical names but for the tied word embedding
(``word_weight``) and the embeddings' LayerNorm (``embed_norm``). Gluon's layouts are torch's (convolutions OIHW,
Dense [out, in]); a BatchNorm or LayerNorm calls its scale and shift ``gamma`` and ``beta``. The float64 model is
the backend's, cast (``Block.cast``); its batch is all float, as the backend's is.
"""

from __future__ import annotations

from collections.abc import Mapping

import mxnet as mx
import numpy as np
from mxnet import autograd

from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.backends.mxnet.step import MxnetTrainer
from dlbench.backends.same_model import Arrays, WeightMap, named_outputs
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import BertConfig, ResNetArch
from dlbench.data.synthetic import BERT_KEYS
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

_NORM_LEAF = {"weight": "gamma", "bias": "beta"}
_NORM_ROLES = ("norm_weight", "residual_norm_weight", "norm_bias")
_BOTTLENECK = {
    "conv1": "body.0",
    "bn1": "body.1",
    "conv2": "body.3",
    "bn2": "body.4",
    "conv3": "body.6",
    "bn3": "body.7",
}
_STEM = 4  # features.0-3: conv, BatchNorm, ReLU, max-pool
_BERT = {"embeddings.word_embeddings.weight": "word_weight", "embeddings.layer_norm": "embed_norm"}


def _resnet_module(arch: ResNetArch, module: str) -> str:
    if module == "fc":
        return "output"
    if module.startswith("stem."):
        return f"features.{module.removeprefix('stem.')}"
    _, stage, block, rest = module.split(".", 3)
    index = _STEM + sum(arch.stages[: int(stage)]) + int(block)
    part, _, tail = rest.partition(".")
    return f"features.{index}.{_BOTTLENECK.get(part, part)}{'.' + tail if tail else ''}"


def mxnet_name(case: Case, t: Tensor) -> str:
    """The model's structural parameter name holding a canonical tensor."""
    module, leaf = t.name.rsplit(".", 1) if "." in t.name else ("", t.name)
    if t.role in _NORM_ROLES:
        leaf = _NORM_LEAF[leaf]
    if isinstance(case.arch, ResNetArch):
        return f"{_resnet_module(case.arch, module)}.{leaf}"
    if isinstance(case.arch, BertConfig):
        if t.name in _BERT:
            return _BERT[t.name]
        if module.startswith("embeddings."):
            module = _BERT.get(module, module.removeprefix("embeddings."))
        return f"{module}.{leaf}" if module else leaf
    raise Unsupported(f"the mxnet weight map does not describe {case.name} yet (backends/mxnet/same_model.py)")


def _trainer(trainer: Trainer) -> MxnetTrainer:
    assert isinstance(trainer, MxnetTrainer), type(trainer)
    return trainer


def _params(trainer: Trainer) -> dict[str, mx.gluon.Parameter]:
    return _trainer(trainer).net.model._collect_params_with_prefix()


class MxnetWeights(WeightMap):
    """The model's parameters by structural name; torch's layouts, norms' gamma and beta."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        params = _params(trainer)
        named = {mxnet_name(case, t): t for t in tensors(case)}
        left = sorted(set(params) - set(named))
        if left:
            raise ValueError(f"no canonical tensor sets mxnet's {', '.join(left[:3])}")
        for key, t in named.items():
            p = params[key]
            if tuple(p.shape) != weights[t.name].shape:
                raise ValueError(f"{t.name} -> {key}: mxnet has {tuple(p.shape)}, canonical {weights[t.name].shape}")
            p.set_data(mx.nd.array(weights[t.name], dtype=p.dtype))
        mx.nd.waitall()

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        params = _params(trainer)
        return {t.name: params[mxnet_name(case, t)].data().asnumpy() for t in tensors(case)}

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's trainer with its loss block cast to float64 (the Trainer keeps the same Parameters)."""
        trainer = _trainer(backend.build(spec, case, RankContext()))
        trainer.net.cast("float64")
        return trainer

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _trainer(trainer).net.model
        fed = self.feed(trainer, case, batch)
        inputs = fed[:4] if isinstance(case.arch, BertConfig) else fed[:1]
        with autograd.train_mode() if train else autograd.predict_mode():
            out = model(*inputs)
        parts = out if isinstance(out, (tuple, list)) else (out,)
        return named_outputs(case, tuple(p.asnumpy() for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> list[mx.nd.NDArray]:
        """The batch as MxnetTrainer takes it: the loss block's positional inputs, all in the model's dtype."""
        t = _trainer(trainer)
        dtype = next(iter(t.net.collect_params().values())).dtype
        keys = BERT_KEYS if isinstance(case.arch, BertConfig) else ("images", "labels")
        return [mx.nd.array(batch[k], ctx=t.ctx, dtype=dtype) for k in keys]


WEIGHTS = MxnetWeights()
