"""ResNet v1.5, VGG, AlexNet and Inception v3 for torch-shaped frameworks, built from the cases' architecture
tables in torchvision's layouts, each with exactly the case's trainable-parameter count (``dlbench.cases``).

`define(ops)` returns the classes built on the framework's ``Module`` (cached: one set per framework), from one
builder per architecture (`_resnet`, `_plain` for VGG and AlexNet, `inception.inception_v3`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dlbench.backends.context import SINGLE, BuildContext
from dlbench.backends.torchlike.inception import inception_v3
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, ResNetArch, VggArch


@dataclass(frozen=True)
class Cnns:
    """The CNN classes of one framework (``ResNet(arch, classes)`` and the like), and builders from a case (each
    takes the build context as every builder does; a CNN is the same on every rank)."""

    ResNet: type
    VGG: type
    AlexNet: type
    InceptionV3: type

    def resnet(self, case: Case, ctx: BuildContext = SINGLE) -> Any:
        return self.ResNet(case.arch, _classes(case))

    def vgg(self, case: Case, ctx: BuildContext = SINGLE) -> Any:
        return self.VGG(case.arch, _classes(case))

    def alexnet(self, case: Case, ctx: BuildContext = SINGLE) -> Any:
        return self.AlexNet(case.arch, _classes(case))

    def inception_v3(self, case: Case, ctx: BuildContext = SINGLE) -> Any:
        return self.InceptionV3(case.arch, _classes(case))


def _classes(case: Case) -> int:
    return case.input.classes if isinstance(case.input, ImageInput) else 1000


@cache
def define(ops: TorchOps) -> Cnns:
    """The framework's CNN classes (cached: one set per framework), one builder per architecture."""
    vgg, alexnet = _plain(ops)
    return Cnns(_resnet(ops), vgg, alexnet, inception_v3(ops, _init_cnn))


def _init_cnn(ops: TorchOps, model: Any, linear_std: float | None = None) -> None:
    """He-normal (fan-out, ReLU) convs, BN 1/0, zero biases; Linear normal(0, std) or the framework's default."""
    nn = ops.nn
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            ops.kaiming_normal(m.weight)
            if m.bias is not None:
                ops.zeros(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            ops.ones(m.weight)
            ops.zeros(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            ops.normal(m.weight, linear_std)
            ops.zeros(m.bias)


def _resnet(ops: TorchOps) -> type:
    """ResNet v1.5 on the framework's Module."""
    nn = ops.nn
    Module: Any = nn.Module  # the framework's base class, chosen at run time: a variable, so typed Any

    class Bottleneck(Module):
        """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), residual."""

        def __init__(self, in_ch: int, width: int, stride: int = 1, expansion: int = 4) -> None:
            super().__init__()
            out_ch = width * expansion
            self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_ch)
            self.relu = ops.relu_layer()
            self.downsample = None
            if stride != 1 or in_ch != out_ch:
                self.downsample = nn.Sequential(
                    nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
                )

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet(Module):
        """Bottleneck ResNet (torchvision layout): 7x7 stem, max-pool, the table's stages, global pool, fc."""

        def __init__(self, arch: ResNetArch, num_classes: int = 1000) -> None:
            super().__init__()
            w = arch.width
            self.stem = nn.Sequential(
                nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(w),
                ops.relu_layer(),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
            stages = []
            in_ch = w
            for i, blocks in enumerate(arch.stages):
                stage = []
                for j in range(blocks):
                    stage.append(Bottleneck(in_ch, w * 2**i, 2 if (i > 0 and j == 0) else 1, arch.expansion))
                    in_ch = w * 2**i * arch.expansion
                stages.append(nn.Sequential(*stage))
            self.stages = nn.Sequential(*stages)
            self.avgpool = ops.adaptive_pool_layer(1)
            self.fc = nn.Linear(in_ch, num_classes)
            _init_cnn(ops, self)

        def forward(self, x: Any) -> Any:
            return self.fc(ops.flatten(self.avgpool(self.stages(self.stem(x)))))

    return ResNet


def _classifier(
    ops: TorchOps, in_features: int, fc: tuple[int, ...], num_classes: int, dropout: float, dropout_last: bool
) -> Any:
    """The FC head of VGG (dropout after each ReLU) and AlexNet (dropout before each hidden Linear)."""
    nn = ops.nn
    layers = []
    for width in fc:
        if not dropout_last:
            layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(in_features, width), ops.relu_layer()]
        if dropout_last:
            layers.append(nn.Dropout(dropout))
        in_features = width
    return nn.Sequential(*layers, nn.Linear(in_features, num_classes))


def _plain(ops: TorchOps) -> tuple[type, type]:
    """VGG and AlexNet (a conv stack, a pool, the FC head) on the framework's Module."""
    nn = ops.nn
    Module: Any = nn.Module

    class Plain(Module):
        """A conv stack, an adaptive average pool to the table's grid, the FC head (VGG and AlexNet)."""

        def __init__(
            self, layers: list[Any], channels: int, arch: VggArch | AlexNetArch, num_classes: int, dropout_last: bool
        ) -> None:
            super().__init__()
            self.features = nn.Sequential(*layers)
            self.avgpool = ops.adaptive_pool_layer(arch.pool)
            self.classifier = _classifier(
                ops, channels * arch.pool**2, arch.fc, num_classes, arch.dropout, dropout_last
            )
            _init_cnn(ops, self, linear_std=0.01)

        def forward(self, x: Any) -> Any:
            return self.classifier(ops.flatten(self.avgpool(self.features(x))))

    class VGG(Plain):
        """VGG from its layer table (3x3 convs, 2x2 max-pools), adaptive average pool, FC head."""

        def __init__(self, arch: VggArch, num_classes: int = 1000) -> None:
            layers, in_ch = [], 3
            for v in arch.layers:
                if v == POOL:
                    layers.append(nn.MaxPool2d(2, stride=2))
                else:
                    assert isinstance(v, int)
                    layers += [nn.Conv2d(in_ch, v, 3, padding=1), ops.relu_layer()]
                    in_ch = v
            super().__init__(layers, in_ch, arch, num_classes, dropout_last=True)

    class AlexNet(Plain):
        """AlexNet from its conv table (torchvision's single-tower layout), adaptive average pool, FC head."""

        def __init__(self, arch: AlexNetArch, num_classes: int = 1000) -> None:
            layers, in_ch = [], 3
            for c in arch.convs:
                layers += [nn.Conv2d(in_ch, c.out, c.kernel, stride=c.stride, padding=c.padding), ops.relu_layer()]
                if c.pool_after:
                    layers.append(nn.MaxPool2d(3, stride=2))
                in_ch = c.out
            super().__init__(layers, in_ch, arch, num_classes, dropout_last=False)

    return VGG, AlexNet
