"""The ResNets in Keras 3 (keras.layers only: any Keras backend), in torchvision's layout (v1.5: the stride in the
3x3 conv, bias-free convs, depths from ``ResNetArch``), NHWC, and the conv, batch-norm and dense helpers the tf
backend's other CNNs share. ``keras.applications.ResNet50`` is v1 with biased convs (25,583,592 trainable
parameters), so it is not used. Padding mirrors torch's explicit ``padding=`` (``ZeroPadding2D`` then a valid conv).
"""

from __future__ import annotations

from typing import TypeAlias

import keras
from keras import layers

from dlbench.cases.arch import ResNetArch

Tensor: TypeAlias = keras.KerasTensor


def _he_fan_out() -> keras.initializers.Initializer:
    """torch's kaiming_normal_ (fan-out), made per layer: an unseeded Keras initializer draws its seed when it is
    created, so one made at import would ignore keras.utils.set_random_seed(spec.seed)."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def _named(name: str | None) -> str | None:
    """A layer's name: the canonical module name, whose dots become '_' on Keras' torch backend (a torch module's
    name cannot hold a '.'; the same-model map that reads the names is the tf backend's)."""
    return name.replace(".", "_") if name and keras.backend.backend() == "torch" else name


def conv(
    x: Tensor,
    filters: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    pad: int | tuple[int, int] = 0,
    bias: bool = False,
    activation: str | None = None,
    name: str | None = None,
) -> Tensor:
    """A conv with torch's padding semantics: symmetric zero padding, then a valid convolution. `name`: the
    canonical module name (dlbench.canonical), where the same-model check's map reads it (same_model.py)."""
    if pad:
        x = layers.ZeroPadding2D(pad)(x)
    return layers.Conv2D(
        filters,
        kernel,
        strides=stride,
        padding="valid",
        use_bias=bias,
        activation=activation,
        kernel_initializer=_he_fan_out(),
        name=_named(name),
    )(x)


def bn(x: Tensor, eps: float, name: str | None = None) -> Tensor:
    """Batch norm with torch's defaults (momentum 0.1 in torch's sense, i.e. 0.9 here), trainable scale and shift."""
    return layers.BatchNormalization(momentum=0.9, epsilon=eps, name=_named(name))(x)


def dense(
    x: Tensor, units: int, activation: str | None = None, std: float | None = None, name: str | None = None
) -> Tensor:
    """A dense layer; normal(0, std) weights and zero bias when std is given (VGG, AlexNet), else Keras' default."""
    init = keras.initializers.RandomNormal(0.0, std) if std is not None else "glorot_uniform"
    return layers.Dense(units, activation=activation, kernel_initializer=init, name=_named(name))(x)


def _bottleneck(x: Tensor, width: int, stride: int, expansion: int, name: str) -> Tensor:
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 carrying the stride, 1x1 expand, projection when needed; its
    layers named as torchvision's (`name`.conv1 ... `name`.downsample.1)."""
    out_ch = expansion * width
    shortcut = x
    if stride != 1 or x.shape[-1] != out_ch:
        shortcut = bn(conv(x, out_ch, 1, stride, name=f"{name}.downsample.0"), 1e-5, f"{name}.downsample.1")
    y = layers.ReLU()(bn(conv(x, width, 1, name=f"{name}.conv1"), 1e-5, f"{name}.bn1"))
    y = layers.ReLU()(bn(conv(y, width, 3, stride, pad=1, name=f"{name}.conv2"), 1e-5, f"{name}.bn2"))
    y = bn(conv(y, out_ch, 1, name=f"{name}.conv3"), 1e-5, f"{name}.bn3")
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet(arch: ResNetArch, size: int, classes: int, name: str) -> keras.Model:
    """Bottleneck ResNet v1.5 (torchvision layout): 7x7 stem, max-pool, the table's stages, global pool, fc."""
    assert arch.stride_on_3x3, "only ResNet v1.5 (stride on the 3x3 conv) is built"
    inputs = keras.Input((size, size, 3))
    x = layers.ReLU()(bn(conv(inputs, arch.width, 7, 2, pad=3, name="stem.0"), 1e-5, "stem.1"))
    x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))  # zero padding is safe after ReLU
    for i, n in enumerate(arch.stages):
        for j in range(n):
            x = _bottleneck(x, arch.width * 2**i, 2 if (i > 0 and j == 0) else 1, arch.expansion, f"stages.{i}.{j}")
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, dense(x, classes, name="fc"), name=name)


__all__ = ["bn", "conv", "dense", "resnet"]
