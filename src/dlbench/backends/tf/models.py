"""Keras 3 definitions of the benchmark's models (CNNs in NHWC, BERT), built from the cases' architecture
tables, each with exactly the case's trainable-parameter count; and the case's training loss.

They follow torchvision's layouts, as the torch backend does, so both frameworks train the same network:

- ResNets (backends/keras/cnn.py, backend-free Keras code the keras framework shares) are v1.5 (stride in the
  3x3 conv) with bias-free convs, depths from ``ResNetArch``; BERT is backends/keras/bert.py, the Llama and MoE
  decoders backends/keras/llama.py and moe.py.
- VGG is built from ``VggArch``'s layer table the way ``keras.applications.VGG16`` builds its body (3x3 "same"
  convs with ReLU and Keras' default initialiser, 2x2 max-pools), with torchvision's head: adaptive average
  pool, then the FC widths with dropout. At 224x224 the pool is the identity and VGG-16's count equals the
  zoo's full VGG16 (138,357,544); at smaller test sizes the count stays the same.
- Inception v3 is written here: ``keras.applications.InceptionV3`` has no auxiliary head and its batch norms
  have no scale (``scale=False``), so its count (23,817,352 trainable) cannot match torchvision's 27,161,264.

Padding mirrors torch's explicit ``padding=`` (``ZeroPadding2D`` then a valid conv or pool) wherever TF's
"same" would pad differently (strided layers, average pools that count the padding).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from dlbench.backends.decoder import LLAMA_MEMBERS, MOE_MEMBERS
from dlbench.backends.keras.bert import build_bert
from dlbench.backends.keras.cnn import bn, conv, dense, resnet
from dlbench.backends.keras.llama import LlamaModel, count_decoder
from dlbench.backends.keras.moe import MoeModel
from dlbench.backends.tf.wide_deep import bce_loss, build_wide_deep
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, InceptionArch, VggArch
from dlbench.cases.llama import llama_arch
from dlbench.cases.moe import moe_arch

Tensor: TypeAlias = keras.KerasTensor


def _pool_matrix(size: int, out: int) -> np.ndarray:
    """[out, size] weights of torch's adaptive average pool: bin i spans floor(i*size/out) to ceil((i+1)*size/out)."""
    m = np.zeros((out, size), dtype="float32")
    for i in range(out):
        lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


class AdaptiveAvgPool2D(layers.Layer):
    """torch's ``adaptive_avg_pool2d`` for static NHWC shapes, smaller inputs included (Keras' own layer fails
    in graph mode when the input is smaller than the output); the identity when the sizes already match."""

    def __init__(self, out: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.out = out

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """[B, H, W, C] -> [B, out, out, C]."""
        h, w = int(x.shape[1]), int(x.shape[2])
        if h == w == self.out:
            return x
        ph = ops.cast(_pool_matrix(h, self.out), x.dtype)
        pw = ops.cast(_pool_matrix(w, self.out), x.dtype)
        return ops.einsum("oh,bhwc,pw->bopc", ph, x, pw)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        """The output shape for an input shape."""
        return (input_shape[0], self.out, self.out, input_shape[3])


# ------------------------------------------------------------------------------------- VGG and AlexNet


def _classifier(x: Tensor, classes: int, fc: tuple[int, ...], dropout: float, dropout_first: bool) -> Tensor:
    """The FC head: dropout after each ReLU (VGG) or before each hidden Linear (AlexNet); its Linears named as
    torchvision's (classifier.K, K their index among the head's layers)."""
    x = layers.Flatten()(x)
    index = 0
    for width in fc:
        if dropout_first:
            x = layers.Dropout(dropout)(x)
        x = dense(x, width, "relu", std=0.01, name=f"classifier.{index + 1 if dropout_first else index}")
        if not dropout_first:
            x = layers.Dropout(dropout)(x)
        index += 3
    return dense(x, classes, std=0.01, name=f"classifier.{index}")


def vgg(arch: VggArch, size: int, classes: int, name: str) -> keras.Model:
    """VGG from its layer table (keras.applications.VGG16's body layers), torchvision's adaptive-pool head."""
    assert not arch.batch_norm, "VGG with batch norm is not built"
    inputs = keras.Input((size, size, 3))
    x, index = inputs, 0  # index: the layer's place in torchvision's features (its name: features.K)
    for v in arch.layers:
        x = (
            layers.MaxPooling2D(2, 2)(x)
            if v == POOL
            else layers.Conv2D(int(v), 3, padding="same", activation="relu", name=f"features.{index}")(x)
        )
        index += 1 if v == POOL else 2
    x = AdaptiveAvgPool2D(arch.pool)(x)
    return keras.Model(inputs, _classifier(x, classes, arch.fc, arch.dropout, dropout_first=False), name=name)


def alexnet(arch: AlexNetArch, size: int, classes: int, name: str) -> keras.Model:
    """AlexNet from its conv table (torchvision's single-tower layout), adaptive average pool, FC head."""
    inputs = keras.Input((size, size, 3))
    x, index = inputs, 0  # index: the conv's place in torchvision's features (its name: features.K)
    for c in arch.convs:
        x = conv(x, c.out, c.kernel, c.stride, pad=c.padding, bias=True, activation="relu", name=f"features.{index}")
        if c.pool_after:
            x = layers.MaxPooling2D(3, 2)(x)
        index += 3 if c.pool_after else 2
    x = AdaptiveAvgPool2D(arch.pool)(x)
    return keras.Model(inputs, _classifier(x, classes, arch.fc, arch.dropout, dropout_first=True), name=name)


# ------------------------------------------------------------------------------------------ Inception v3


def _basic(
    x: Tensor, filters: int, kernel: int | tuple[int, int], stride: int = 1, pad: int | tuple[int, int] = 0
) -> Tensor:
    """torchvision's BasicConv2d: bias-free conv, batch norm (eps 1e-3, with scale), ReLU."""
    return layers.ReLU()(bn(conv(x, filters, kernel, stride, pad), 1e-3))


def _avg3(x: Tensor) -> Tensor:
    """3x3/1 average pool with padding 1 counted in the mean (torch's count_include_pad=True)."""
    return layers.AveragePooling2D(3, 1)(layers.ZeroPadding2D(1)(x))


def _cat(branches: list[Tensor]) -> Tensor:
    return layers.Concatenate()(branches)


def _inception_a(x: Tensor, pool_features: int) -> Tensor:
    b5 = _basic(_basic(x, 48, 1), 64, 5, pad=2)
    b3 = _basic(_basic(_basic(x, 64, 1), 96, 3, pad=1), 96, 3, pad=1)
    return _cat([_basic(x, 64, 1), b5, b3, _basic(_avg3(x), pool_features, 1)])


def _inception_b(x: Tensor) -> Tensor:
    b3 = _basic(_basic(_basic(x, 64, 1), 96, 3, pad=1), 96, 3, stride=2)
    return _cat([_basic(x, 384, 3, stride=2), b3, layers.MaxPooling2D(3, 2)(x)])


def _c7(x: Tensor, filters: int, horizontal: bool) -> Tensor:
    """A 1x7 (horizontal) or 7x1 factorised conv with 'same' padding."""
    return _basic(x, filters, (1, 7) if horizontal else (7, 1), pad=(0, 3) if horizontal else (3, 0))


def _inception_c(x: Tensor, c7: int) -> Tensor:
    b7 = _c7(_c7(_basic(x, c7, 1), c7, True), 192, False)
    d = _basic(x, c7, 1)
    for filters, horizontal in ((c7, False), (c7, True), (c7, False), (192, True)):
        d = _c7(d, filters, horizontal)
    return _cat([_basic(x, 192, 1), b7, d, _basic(_avg3(x), 192, 1)])


def _inception_d(x: Tensor) -> Tensor:
    b3 = _basic(_basic(x, 192, 1), 320, 3, stride=2)
    b7 = _c7(_c7(_basic(x, 192, 1), 192, True), 192, False)
    return _cat([b3, _basic(b7, 192, 3, stride=2), layers.MaxPooling2D(3, 2)(x)])


def _inception_e(x: Tensor) -> Tensor:
    a = _basic(x, 384, 1)
    d = _basic(_basic(x, 448, 1), 384, 3, pad=1)
    return _cat(
        [
            _basic(x, 320, 1),
            _basic(a, 384, (1, 3), pad=(0, 1)),
            _basic(a, 384, (3, 1), pad=(1, 0)),
            _basic(d, 384, (1, 3), pad=(0, 1)),
            _basic(d, 384, (3, 1), pad=(1, 0)),
            _basic(_avg3(x), 192, 1),
        ]
    )


def _inception_aux(x: Tensor, classes: int) -> Tensor:
    """Auxiliary classifier on the 17x17 grid: 5x5/3 average pool, 1x1 (128), 5x5 (768), fc."""
    # As in the torch backend: torchvision's 5x5/3 pool needs a >= 17x17 grid; smaller inputs pool to 5x5.
    pool = layers.AveragePooling2D(5, 3) if min(x.shape[1:3]) >= 17 else AdaptiveAvgPool2D(5)
    x = _basic(_basic(pool(x), 128, 1), 768, 5)
    return dense(layers.GlobalAveragePooling2D()(x), classes)


def inception_v3(arch: InceptionArch, size: int, classes: int, name: str) -> keras.Model:
    """Inception v3 in torchvision's ``Inception3`` layout; outputs [logits, aux_logits] with the auxiliary head
    (always training), else logits."""
    inputs = keras.Input((size, size, 3))
    x = _basic(_basic(_basic(inputs, 32, 3, stride=2), 32, 3), 64, 3, pad=1)
    x = layers.MaxPooling2D(3, 2)(x)
    x = layers.MaxPooling2D(3, 2)(_basic(_basic(x, 80, 1), 192, 3))
    for pool_features in (32, 64, 64):
        x = _inception_a(x, pool_features)
    x = _inception_b(x)
    for c7 in (128, 160, 160, 192):
        x = _inception_c(x, c7)
    aux = _inception_aux(x, classes) if arch.aux_logits else None
    x = _inception_e(_inception_e(_inception_d(x)))
    x = layers.Dropout(arch.dropout)(layers.GlobalAveragePooling2D()(x))
    logits = dense(x, classes)
    return keras.Model(inputs, logits if aux is None else [logits, aux], name=name)


# ----------------------------------------------------------------------------------- registry and loss

Builder: TypeAlias = Callable[[Case, int | None], keras.Model]


def _image(build: Callable[..., keras.Model]) -> Builder:
    """A builder of an image model from the case's table, at `size` (the case's input size when None)."""

    def make(case: Case, size: int | None) -> keras.Model:
        assert isinstance(case.input, ImageInput)
        return build(case.arch, size or case.input.size, case.input.classes, case.name)

    return make


def _bert(case: Case, size: int | None) -> keras.Model:
    assert isinstance(case.arch, BertConfig)
    return build_bert(case.arch)


# The model table: case name -> builder(case, input size) reading the case's architecture (Keras needs the
# static input shape). The only place a case is named.
MODELS: dict[str, Builder] = {
    "resnet50": _image(resnet),
    "resnet152": _image(resnet),
    "vgg16": _image(vgg),
    "alexnet": _image(alexnet),
    "inception_v3": _image(inception_v3),
    "bert_base": _bert,
    "wide_deep": lambda case, size: build_wide_deep(case),
    # The Llama and MoE families (#46): Keras 3 code shared with the keras framework (backends/keras).
    **dict.fromkeys(LLAMA_MEMBERS, lambda case, size: LlamaModel(llama_arch(case), name=case.name)),
    **dict.fromkeys(MOE_MEMBERS, lambda case, size: MoeModel(moe_arch(case), name=case.name)),
}
DECODERS: frozenset[str] = frozenset((*LLAMA_MEMBERS, *MOE_MEMBERS))


def build_model(case: Case, input_size: int | None = None) -> keras.Model:
    """A freshly initialised Keras model for the case, under the current global precision policy."""
    return MODELS[case.name](case, input_size)


def count_case(case: Case) -> int:
    """The case's trainable parameters: a decoder's counted without allocating its weights (count_decoder), any
    other model's from a built model."""
    if case.name in DECODERS:
        return count_decoder(lambda: build_model(case))
    return count_trainable(build_model(case))


def count_trainable(model: keras.Model) -> int:
    """Number of trainable parameters; a variable used twice (BERT's tied decoder) is one variable."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def _xent(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-example softmax cross-entropy, computed in float32."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))


def train_loss(case: Case, model: keras.Model, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """The case's training loss, a float32 scalar: cross-entropy (+ aux_weight x the auxiliary head's), or
    MLM + NSP with Google's masked-LM loss, sum(ce x mlm_weights) / (sum(mlm_weights) + 1e-5)."""
    if case.loss.kind == "bce":
        return bce_loss(model, batch)
    if case.loss.kind == "causal_lm":  # mean next-token cross-entropy (+ aux weight x a MoE's balancing loss)
        out = model(batch["input_ids"], training=True)
        logits, aux = out if isinstance(out, tuple) else (out, None)
        loss = tf.reduce_mean(_xent(batch["labels"], logits))
        return loss if aux is None else loss + case.loss.aux_weight * tf.cast(aux, tf.float32)
    if case.loss.kind == "mlm_nsp":
        mlm_logits, nsp_logits = model(batch, training=True)
        weights = tf.cast(batch["mlm_weights"], tf.float32)
        mlm = tf.reduce_sum(_xent(batch["mlm_ids"], mlm_logits) * weights) / (tf.reduce_sum(weights) + 1e-5)
        return mlm + tf.reduce_mean(_xent(batch["nsp_labels"], nsp_logits))
    out = model(batch["images"], training=True)
    labels = batch["labels"]
    if isinstance(out, (list, tuple)):  # a model with an auxiliary head: [logits, aux_logits]
        return tf.reduce_mean(_xent(labels, out[0])) + case.loss.aux_weight * tf.reduce_mean(_xent(labels, out[1]))
    return tf.reduce_mean(_xent(labels, out))


__all__ = [
    "MODELS",
    "alexnet",
    "build_model",
    "count_case",
    "count_trainable",
    "inception_v3",
    "resnet",
    "train_loss",
    "vgg",
]
