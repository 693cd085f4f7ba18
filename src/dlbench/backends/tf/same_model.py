"""The Keras models' canonical weights (`dlbench check same-model`): which Keras variable holds each canonical
tensor, and in which layout.

The functional CNNs name their layers with the canonical module names (models.py: ``stages.0.0.conv1``,
``features.3``, ``classifier.1``), so a canonical tensor is its layer's variable; the first classifier Linear of
VGG and AlexNet reads the feature map flattened NHWC, so its input columns are reordered; the subclassed BERT is reached through its attributes (`bert_variable`).
The tensor's role names the variable and its layout: conv kernels HWIO (``kernel``), dense kernels [in, out],
BatchNorm's ``gamma``, ``beta``, ``moving_mean`` and ``moving_variance``, LayerNorm's ``gamma`` and ``beta``,
embeddings' ``embeddings``. Images are NHWC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.backends.same_model import (
    Arrays,
    WeightMap,
    as_model_input,
    from_channels_last,
    named_outputs,
    nchw_to_nhwc,
    to_channels_last,
)
from dlbench.backends.tf.models import build_model
from dlbench.backends.tf.step import TfTrainer
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import AlexNetArch, BertConfig, ResNetArch, VggArch, WideDeepArch
from dlbench.spec import PointSpec

_LEAF = {
    "conv": "kernel",
    "linear": "kernel",
    "bias": "bias",
    "norm_weight": "gamma",
    "residual_norm_weight": "gamma",
    "norm_bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
    "embedding": "embeddings",
}
# BERT's canonical modules as attribute paths of the Keras model (bert.py).
_BERT_TOP = {
    "embeddings.word_embeddings": "embeddings.word",
    "embeddings.position_embeddings": "embeddings.position",
    "embeddings.token_type_embeddings": "embeddings.token_type",
    "embeddings.layer_norm": "embeddings.norm",
}
_BERT_LAYER = {"output": "ffn_out"}  # the rest keep their names: qkv, attn_out, attn_norm, intermediate, out_norm


def bert_attributes(module: str) -> str:
    """A canonical BERT module as the attribute path of the Keras model ('layers.3.qkv' -> 'encoder.3.qkv')."""
    if module in _BERT_TOP:
        return _BERT_TOP[module]
    if module.startswith("layers."):
        _, i, layer = module.split(".", 2)
        return f"encoder.{i}.{_BERT_LAYER.get(layer, layer)}"
    return module  # pooler, nsp, mlm_transform, mlm_norm


def _attribute(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def variable(model: keras.Model, case: Case, t: Tensor) -> Any:
    """The Keras variable holding a canonical tensor."""
    if isinstance(case.arch, BertConfig):
        if t.name == "mlm_bias":
            return model.mlm_bias
        module, _ = t.name.rsplit(".", 1)
        return getattr(_attribute(model, bert_attributes(module)), _LEAF[t.role])
    if isinstance(case.arch, (ResNetArch, VggArch, AlexNetArch, WideDeepArch)):
        module, _ = t.name.rsplit(".", 1)
        return getattr(model.get_layer(module), _LEAF[t.role])
    raise Unsupported(f"the tf weight map does not describe {case.name} yet (backends/tf/same_model.py)")


def _model(trainer: Trainer) -> keras.Model:
    assert isinstance(trainer, TfTrainer), type(trainer)
    return trainer.model


class TfWeights(WeightMap):
    """The Keras model's variables."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        model = _model(trainer)
        seen = set()
        for t in tensors(case):
            v = variable(model, case, t)
            value = to_channels_last(case, t, weights[t.name])
            if tuple(v.shape) != value.shape:
                raise ValueError(f"{t.name} -> {v.path}: Keras has {tuple(v.shape)}, canonical {value.shape}")
            v.assign(value.astype(v.dtype))
            seen.add(id(v))
        left = [v.path for v in model.trainable_variables if id(v) not in seen]
        if left:
            raise ValueError(f"no canonical tensor sets {', '.join(left[:3])}")

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        model = _model(trainer)
        return {
            t.name: from_channels_last(case, t, np.asarray(variable(model, case, t).numpy())) for t in tensors(case)
        }

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's Keras model and train step under the float64 policy (this process only)."""
        keras.mixed_precision.set_global_policy("float64")
        with tf.device("/CPU:0"):
            model = build_model(case, spec.input_size)
        return TfTrainer(case, model, iter(()), "/CPU:0", jit_compile=False, loss_scale=False, global_batch=1)

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        fed = self.feed(trainer, case, batch)
        if isinstance(case.arch, WideDeepArch):
            out = model({k: fed[k] for k in ("dense", "deep_ids", "wide_ids")}, training=train)
        else:
            out = model(fed if isinstance(case.arch, BertConfig) else fed["images"], training=train)
        parts = out if isinstance(out, (list, tuple)) else (out,)
        return named_outputs(case, tuple(np.asarray(p) for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, tf.Tensor]:
        out = as_model_input(batch, _model(trainer).dtype_policy.variable_dtype)
        if "images" in out:
            out["images"] = nchw_to_nhwc(out["images"])
        return {k: tf.constant(v) for k, v in out.items()}


WEIGHTS = TfWeights()
