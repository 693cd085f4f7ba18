"""flax.linen definitions of the benchmark's CNNs (NHWC), each with exactly the case's parameter count.

The layouts follow the torch backend (torchvision's layouts; ResNet in its v1.5 form, stride on the 3x3).
Every module takes ``dtype`` (the compute dtype); parameters stay float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

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
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        conv = partial(nn.Conv, use_bias=False, kernel_init=_KAIMING, dtype=self.dtype)
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5,
                       use_fast_variance=False, dtype=self.dtype)
        out_ch = self.width * 4
        y = nn.relu(norm()(conv(self.width, (1, 1))(x)))
        y = nn.relu(norm()(conv(self.width, (3, 3), strides=self.stride, padding=_pad(1))(y)))
        y = norm()(conv(out_ch, (1, 1))(y))
        if self.stride != 1 or x.shape[-1] != out_ch:
            x = norm()(conv(out_ch, (1, 1), strides=self.stride)(x))
        return nn.relu(y + x)


class ResNet(nn.Module):
    """Bottleneck ResNet: 7x7 stem, max-pool, four stages, global average pool, fc."""

    stages: Sequence[int]
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        x = nn.Conv(64, (7, 7), strides=2, padding=_pad(3), use_bias=False, kernel_init=_KAIMING, dtype=self.dtype)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, use_fast_variance=False,
                                 dtype=self.dtype)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=_pad(1))
        for i, blocks in enumerate(self.stages):
            for j in range(blocks):
                x = Bottleneck(64 * 2**i, 2 if (i > 0 and j == 0) else 1, dtype=self.dtype)(x, train)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x.mean(axis=(1, 2)))


# ------------------------------------------------------------------------------------- VGG and AlexNet

_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class Classifier(nn.Module):
    """The 4096-4096-classes head: VGG puts dropout after each ReLU, AlexNet before each Linear."""

    num_classes: int
    dropout_first: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        dense = partial(nn.Dense, kernel_init=nn.initializers.normal(0.01), dtype=self.dtype)
        drop = partial(nn.Dropout, 0.5, deterministic=not train)
        for _ in range(2):
            if self.dropout_first:
                x = drop()(x)
            x = nn.relu(dense(4096)(x))
            if not self.dropout_first:
                x = drop()(x)
        return dense(self.num_classes)(x)


class VGG16(nn.Module):
    """VGG-16 (configuration D) without batch norm; adaptive 7x7 average pool; 4096-4096 classifier."""

    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        for v in _VGG16:
            if v == "M":
                x = nn.max_pool(x, (2, 2), strides=(2, 2))
            else:
                x = nn.relu(nn.Conv(int(v), (3, 3), padding=_pad(1), kernel_init=_KAIMING, dtype=self.dtype)(x))
        x = adaptive_avg_pool(x, 7).reshape(x.shape[0], -1)
        return Classifier(self.num_classes, dropout_first=False, dtype=self.dtype)(x, train)


class AlexNet(nn.Module):
    """AlexNet in torchvision's single-tower layout (64-192-384-256-256), adaptive 6x6 average pool."""

    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array:
        conv = partial(nn.Conv, kernel_init=_KAIMING, dtype=self.dtype)
        pool = partial(nn.max_pool, window_shape=(3, 3), strides=(2, 2))
        x = pool(nn.relu(conv(64, (11, 11), strides=4, padding=_pad(2))(x)))
        x = pool(nn.relu(conv(192, (5, 5), padding=_pad(2))(x)))
        x = nn.relu(conv(384, (3, 3), padding=_pad(1))(x))
        x = nn.relu(conv(256, (3, 3), padding=_pad(1))(x))
        x = pool(nn.relu(conv(256, (3, 3), padding=_pad(1))(x)))
        x = adaptive_avg_pool(x, 6).reshape(x.shape[0], -1)
        return Classifier(self.num_classes, dropout_first=True, dtype=self.dtype)(x, train)


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
        x = nn.Conv(self.features, _ks(self.kernel), strides=self.stride, padding=_pad(self.padding),
                    use_bias=False, kernel_init=_KAIMING, dtype=self.dtype)(x)
        return nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-3, use_fast_variance=False,
                                    dtype=self.dtype)(x))


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
            outs = [ch([_c1(64)])(x, train), ch([_c1(48), (64, 5, 1, 2)])(x, train),
                    ch([_c1(64), _c3(96), _c3(96)])(x, train), ch([_c1(a)])(_avg3(x), train)]
        elif k == "B":
            outs = [ch([_c3(384, 2, 0)])(x, train), ch([_c1(64), _c3(96), _c3(96, 2, 0)])(x, train), _max3(x)]
        elif k == "C":
            outs = [ch([_c1(192)])(x, train), ch([_c1(a), _h7(a), _v7(192)])(x, train),
                    ch([_c1(a), _v7(a), _h7(a), _v7(a), _h7(192)])(x, train), ch([_c1(192)])(_avg3(x), train)]
        elif k == "D":
            outs = [ch([_c1(192), _c3(320, 2, 0)])(x, train),
                    ch([_c1(192), _h7(192), _v7(192), _c3(192, 2, 0)])(x, train), _max3(x)]
        else:  # E
            b = ch([_c1(384)])(x, train)
            d = ch([_c1(448), _c3(384)])(x, train)
            outs = [ch([_c1(320)])(x, train), ch([(384, (1, 3), 1, (0, 1))])(b, train),
                    ch([(384, (3, 1), 1, (1, 0))])(b, train), ch([(384, (1, 3), 1, (0, 1))])(d, train),
                    ch([(384, (3, 1), 1, (1, 0))])(d, train), ch([_c1(192)])(_avg3(x), train)]
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
    """Inception v3 with the auxiliary head: returns (logits, aux_logits) in training, logits otherwise."""

    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = True) -> Array | tuple[Array, Array]:
        blk = partial(InceptionBlock, dtype=self.dtype)
        x = Chain([_c3(32, 2, 0), _c3(32, 1, 0), _c3(64)], dtype=self.dtype)(x, train)
        x = Chain([_c1(80), _c3(192, 1, 0)], dtype=self.dtype)(_max3(x), train)
        x = _max3(x)
        for kind, arg in (("A", 32), ("A", 64), ("A", 64), ("B", 0), ("C", 128), ("C", 160), ("C", 160),
                          ("C", 192)):
            x = blk(kind, arg)(x, train)
        aux = InceptionAux(self.num_classes, dtype=self.dtype)(x, train) if train or self.is_initializing() else None
        for kind in ("D", "E", "E"):
            x = blk(kind)(x, train)
        x = nn.Dropout(0.5, deterministic=not train)(x.mean(axis=(1, 2)))
        logits = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return (logits, aux) if aux is not None else logits


# ---------------------------------------------------------------------------------------------- registry

BUILDERS: dict[str, Callable[[int, Any], nn.Module]] = {
    "resnet50": lambda n, dt: ResNet((3, 4, 6, 3), n, dtype=dt),
    "resnet152": lambda n, dt: ResNet((3, 8, 36, 3), n, dtype=dt),
    "vgg16": lambda n, dt: VGG16(n, dtype=dt),
    "alexnet": lambda n, dt: AlexNet(n, dtype=dt),
    "inception_v3": lambda n, dt: InceptionV3(n, dtype=dt),
}
