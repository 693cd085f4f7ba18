"""flax.linen definitions of the benchmark's models (NHWC), built from the cases' architecture tables, each
with exactly the case's parameter count; and the cases' training losses.

The layouts follow the torch backend (torchvision's layouts; ResNet in its v1.5 form, stride on the 3x3).
Every module takes ``dtype`` (the compute dtype); parameters stay float32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

from dlbench.backends.jax import dlrm, wide_deep
from dlbench.backends.jax.bert import BertForPretraining, mlm_nsp_loss
from dlbench.backends.jax.dit import DitModel, flow_matching_loss
from dlbench.backends.jax.gpt import GptLMHeadModel
from dlbench.backends.jax.llama import LlamaModel
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, DlrmArch, InceptionArch, ResNetArch, VggArch
from dlbench.cases.dit import dit_arch
from dlbench.cases.gpt import gpt_arch
from dlbench.cases.llama import llama_arch
from dlbench.cases.lora import lora_of

Array = Any
_KAIMING = nn.initializers.variance_scaling(2.0, "fan_out", "normal")  # torch's kaiming_normal_(fan_out, relu)


def adaptive_avg_pool(x: Array, out: int) -> Array:
    """torch's AdaptiveAvgPool2d on NHWC: bin k spans [floor(k*n/out), ceil((k+1)*n/out))."""
    for axis in (1, 2):
        n = x.shape[axis]
        bins = [(k * n // out, -((-(k + 1) * n) // out)) for k in range(out)]
        x = jnp.stack([jnp.take(x, jnp.arange(a, b), axis=axis).mean(axis=axis) for a, b in bins], axis=axis)
    return x


def _pad(p: int | tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    ph, pw = (p, p) if isinstance(p, int) else p
    return ((ph, ph), (pw, pw))


def _ks(k: int | tuple[int, int]) -> tuple[int, int]:
    return (k, k) if isinstance(k, int) else k


# ---------------------------------------------------------------------------------------------- ResNet


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), residual."""

    width: int
    stride: int
    expansion: int = 4
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        conv = partial(nn.Conv, use_bias=False, kernel_init=_KAIMING, dtype=self.dtype)
        # flax's default fast variance (E[x^2] - E[x]^2, one pass), as the Flax ImageNet example trains
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)
        out_ch = self.width * self.expansion
        y = nn.relu(norm()(conv(self.width, (1, 1))(x)))
        y = nn.relu(norm()(conv(self.width, (3, 3), strides=self.stride, padding=_pad(1))(y)))
        y = norm()(conv(out_ch, (1, 1))(y))
        if self.stride != 1 or x.shape[-1] != out_ch:
            x = norm()(conv(out_ch, (1, 1), strides=self.stride)(x))
        return nn.relu(y + x)


class ResNet(nn.Module):
    """Bottleneck ResNet from its arch table: 7x7 stem, max-pool, the stages, global average pool, fc."""

    arch: ResNetArch
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        w = self.arch.width
        x = nn.Conv(w, (7, 7), strides=2, padding=_pad(3), use_bias=False, kernel_init=_KAIMING, dtype=self.dtype)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=_pad(1))
        for i, blocks in enumerate(self.arch.stages):
            for j in range(blocks):
                x = Bottleneck(w * 2**i, 2 if (i > 0 and j == 0) else 1, self.arch.expansion, dtype=self.dtype)(
                    x, train
                )
        return nn.Dense(self.num_classes, dtype=self.dtype)(x.mean(axis=(1, 2)))


# ------------------------------------------------------------------------------------- VGG and AlexNet


class Classifier(nn.Module):
    """The FC head: VGG puts dropout after each hidden ReLU, AlexNet before each hidden Linear."""

    fc: Sequence[int]
    num_classes: int
    dropout: float
    dropout_first: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        dense = partial(nn.Dense, kernel_init=nn.initializers.normal(0.01), dtype=self.dtype)
        drop = partial(nn.Dropout, self.dropout, deterministic=not train)
        for width in self.fc:
            if self.dropout_first:
                x = drop()(x)
            x = nn.relu(dense(width)(x))
            if not self.dropout_first:
                x = drop()(x)
        return dense(self.num_classes)(x)


class VGG(nn.Module):
    """VGG from its layer table (3x3 convs, 2x2 max-pools), adaptive average pool, FC head."""

    arch: VggArch
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        assert not self.arch.batch_norm, "VGG with batch norm is not built by the JAX backend"
        for v in self.arch.layers:
            if v == POOL:
                x = nn.max_pool(x, (2, 2), strides=(2, 2))
            else:
                x = nn.relu(nn.Conv(int(v), (3, 3), padding=_pad(1), kernel_init=_KAIMING, dtype=self.dtype)(x))
        x = adaptive_avg_pool(x, self.arch.pool).reshape(x.shape[0], -1)
        a = self.arch
        return Classifier(a.fc, self.num_classes, a.dropout, dropout_first=False, dtype=self.dtype)(x, train)


class AlexNet(nn.Module):
    """AlexNet from its conv table (torchvision's single-tower layout), adaptive average pool, FC head."""

    arch: AlexNetArch
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        for c in self.arch.convs:
            conv = nn.Conv(
                c.out, _ks(c.kernel), strides=c.stride, padding=_pad(c.padding), kernel_init=_KAIMING, dtype=self.dtype
            )
            x = nn.relu(conv(x))
            if c.pool_after:
                x = nn.max_pool(x, (3, 3), strides=(2, 2))
        x = adaptive_avg_pool(x, self.arch.pool).reshape(x.shape[0], -1)
        a = self.arch
        return Classifier(a.fc, self.num_classes, a.dropout, dropout_first=True, dtype=self.dtype)(x, train)


# ------------------------------------------------------------------------------------------ Inception v3


class BasicConv(nn.Module):
    """Bias-free conv, batch norm (eps 1e-3), ReLU."""

    features: int
    kernel: int | tuple[int, int]
    stride: int = 1
    padding: int | tuple[int, int] = 0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        x = nn.Conv(
            self.features,
            _ks(self.kernel),
            strides=self.stride,
            padding=_pad(self.padding),
            use_bias=False,
            kernel_init=_KAIMING,
            dtype=self.dtype,
        )(x)
        return nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-3, dtype=self.dtype)(x))


def _avg3(x: Array) -> Array:
    return nn.avg_pool(x, (3, 3), strides=(1, 1), padding=_pad(1), count_include_pad=True)


def _max3(x: Array) -> Array:
    return nn.max_pool(x, (3, 3), strides=(2, 2))


Spec = tuple[int, int | tuple[int, int], int, int | tuple[int, int]]  # features, kernel, stride, padding


class Chain(nn.Module):
    """BasicConvs applied in sequence, each given as (features, kernel, stride, padding)."""

    convs: Sequence[Spec]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        for f, k, s, p in self.convs:
            x = BasicConv(f, k, s, p, dtype=self.dtype)(x, train)
        return x


def _c1(f: int) -> Spec:
    return (f, 1, 1, 0)


def _c3(f: int, stride: int = 1, pad: int = 1) -> Spec:
    return (f, 3, stride, pad)


def _h7(f: int) -> Spec:  # 1x7, 'same'
    return (f, (1, 7), 1, (0, 3))


def _v7(f: int) -> Spec:  # 7x1, 'same'
    return (f, (7, 1), 1, (3, 0))


class InceptionBlock(nn.Module):
    """One Inception block: A, B, C, D or E (torchvision's Inception3 layouts), branches concatenated."""

    kind: str
    arg: int = 0  # pool features (A) or c7 channels (C)
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        ch = partial(Chain, dtype=self.dtype)
        k, a = self.kind, self.arg
        if k == "A":
            outs = [
                ch([_c1(64)])(x, train),
                ch([_c1(48), (64, 5, 1, 2)])(x, train),
                ch([_c1(64), _c3(96), _c3(96)])(x, train),
                ch([_c1(a)])(_avg3(x), train),
            ]
        elif k == "B":
            outs = [ch([_c3(384, 2, 0)])(x, train), ch([_c1(64), _c3(96), _c3(96, 2, 0)])(x, train), _max3(x)]
        elif k == "C":
            outs = [
                ch([_c1(192)])(x, train),
                ch([_c1(a), _h7(a), _v7(192)])(x, train),
                ch([_c1(a), _v7(a), _h7(a), _v7(a), _h7(192)])(x, train),
                ch([_c1(192)])(_avg3(x), train),
            ]
        elif k == "D":
            outs = [
                ch([_c1(192), _c3(320, 2, 0)])(x, train),
                ch([_c1(192), _h7(192), _v7(192), _c3(192, 2, 0)])(x, train),
                _max3(x),
            ]
        else:  # E
            b = ch([_c1(384)])(x, train)
            d = ch([_c1(448), _c3(384)])(x, train)
            outs = [
                ch([_c1(320)])(x, train),
                ch([(384, (1, 3), 1, (0, 1))])(b, train),
                ch([(384, (3, 1), 1, (1, 0))])(b, train),
                ch([(384, (1, 3), 1, (0, 1))])(d, train),
                ch([(384, (3, 1), 1, (1, 0))])(d, train),
                ch([_c1(192)])(_avg3(x), train),
            ]
        return jnp.concatenate(outs, axis=-1)


class InceptionAux(nn.Module):
    """Auxiliary classifier on the 17x17 grid: 5x5/3 average pool, 1x1 (128), 5x5 (768), fc."""

    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        # torchvision's 5x5/3 pool needs a >= 17x17 grid (inputs near 299); smaller inputs pool to 5x5.
        x = nn.avg_pool(x, (5, 5), strides=(3, 3)) if min(x.shape[1:3]) >= 17 else adaptive_avg_pool(x, 5)
        x = Chain([_c1(128), (768, 5, 1, 0)], dtype=self.dtype)(x, train)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x.mean(axis=(1, 2)))


class InceptionV3(nn.Module):
    """Inception v3; with the arch's auxiliary head it returns (logits, aux_logits) in training, else logits."""

    arch: InceptionArch
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array | tuple[Array, Array]:
        blk = partial(InceptionBlock, dtype=self.dtype)
        x = Chain([_c3(32, 2, 0), _c3(32, 1, 0), _c3(64)], dtype=self.dtype)(x, train)
        x = Chain([_c1(80), _c3(192, 1, 0)], dtype=self.dtype)(_max3(x), train)
        x = _max3(x)
        for kind, arg in (("A", 32), ("A", 64), ("A", 64), ("B", 0), ("C", 128), ("C", 160), ("C", 160), ("C", 192)):
            x = blk(kind, arg)(x, train)
        with_aux = self.arch.aux_logits and (train or self.is_initializing())
        aux = InceptionAux(self.num_classes, dtype=self.dtype)(x, train) if with_aux else None
        for kind in ("D", "E", "E"):
            x = blk(kind)(x, train)
        x = nn.Dropout(self.arch.dropout, deterministic=not train)(x.mean(axis=(1, 2)))
        logits = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return (logits, aux) if aux is not None else logits


# ----------------------------------------------------------------------------------- registry and losses


def _classes(case: Case) -> int:
    return case.input.classes if isinstance(case.input, ImageInput) else 1000


Builder = Callable[[Case, Any], nn.Module]

# The model table: case name -> builder(case, compute dtype) reading the case's architecture. The only place a
# case is named.
MODELS: dict[str, Builder] = {
    "resnet50": lambda c, dt: ResNet(c.arch, _classes(c), dtype=dt),
    "resnet152": lambda c, dt: ResNet(c.arch, _classes(c), dtype=dt),
    "vgg16": lambda c, dt: VGG(c.arch, _classes(c), dtype=dt),
    "alexnet": lambda c, dt: AlexNet(c.arch, _classes(c), dtype=dt),
    "inception_v3": lambda c, dt: InceptionV3(c.arch, _classes(c), dtype=dt),
    "bert_base": lambda c, dt: BertForPretraining(c.arch, dtype=dt),
    "gpt2_small": lambda c, dt: GptLMHeadModel(gpt_arch(c), dtype=dt),
    "gpt": lambda c, dt: GptLMHeadModel(gpt_arch(c), dtype=dt),
    "wide_deep": lambda c, dt: wide_deep.WideDeep(c, dtype=dt),
    "dlrm_v2": lambda c, dt: dlrm.Dlrm(c, dtype=dt),
    "dlrm_tiny": lambda c, dt: dlrm.Dlrm(c, dtype=dt),
    "flux1": lambda c, dt: DitModel(dit_arch(c), dtype=dt),
    "dit_tiny": lambda c, dt: DitModel(dit_arch(c), dtype=dt),
    **{
        name: (lambda c, dt: LlamaModel(llama_arch(c), dtype=dt, lora=lora_of(c)))
        for name in ("llama", "llama3_8b", "llama3_1b", "llama2_70b", "llama_tiny")
    },
}


def build_module(case: Case, dtype: Any = jnp.float32, recompute: bool = False) -> nn.Module:
    """The flax module for a case (compute in dtype, parameters in float32); `recompute`: a GPT's blocks under
    nn.remat (the backend refuses it for the other cases)."""
    module = MODELS[case.name](case, dtype)
    return module.clone(recompute=True) if recompute else module


def model_inputs(case: Case, batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """The positional inputs of the case's model, taken from a batch (arrays or shape structs)."""
    if case.loss.kind == "mlm_nsp":
        return (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["mlm_positions"])
    if case.loss.kind == "bce":
        return dlrm.inputs(batch) if isinstance(case.arch, DlrmArch) else wide_deep.inputs(batch)
    if case.loss.kind == "causal_lm":
        return (batch["input_ids"],)
    if case.loss.kind == "flow_matching":
        return (batch["latents"], batch["text"], batch["pooled"])
    return (batch["images"],)


def _xent(logits: Array, labels: Array) -> jax.Array:
    """Mean softmax cross-entropy over every prediction (every position of a sequence), in float32."""
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()


def train_loss(case: Case, outputs: Any, batch: Mapping[str, Any]) -> jax.Array:
    """The case's loss on the model's outputs: cross-entropy (+ aux_weight x the auxiliary head's), MLM + NSP,
    Wide & Deep's BCE, the causal LM's mean next-token cross-entropy over every position, or a DiT's flow matching."""
    if case.loss.kind == "mlm_nsp":
        mlm, nsp = outputs
        return mlm_nsp_loss(mlm, nsp, batch["mlm_ids"], batch["mlm_weights"], batch["nsp_labels"])
    if case.loss.kind == "bce":
        return wide_deep.bce_loss(outputs, batch)
    if case.loss.kind == "causal_lm":
        return _xent(outputs, batch["labels"])
    if case.loss.kind == "flow_matching":  # the model drew the noise and built its target (dit.py)
        return flow_matching_loss(outputs)
    if isinstance(outputs, tuple):  # a model with an auxiliary head, in training mode: (logits, aux_logits)
        logits, aux = outputs
        return _xent(logits, batch["labels"]) + case.loss.aux_weight * _xent(aux, batch["labels"])
    return _xent(outputs, batch["labels"])


__all__ = ["MODELS", "build_module", "model_inputs", "train_loss"]
