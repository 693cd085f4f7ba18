"""ResNet v1.5, VGG, AlexNet and Inception v3 for torch-shaped frameworks, built from the cases' architecture
tables in torchvision's layouts, each with exactly the case's trainable-parameter count (``dlbench.cases``).

`define(ops)` returns the classes built on the framework's ``Module`` (cached: one set per framework), from one
builder per architecture (`_resnet`, `_plain` for VGG and AlexNet, `_inception_v3`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dlbench.backends.context import SINGLE, BuildContext
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, InceptionArch, ResNetArch, VggArch


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
    return Cnns(_resnet(ops), vgg, alexnet, _inception_v3(ops))


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


def _plain(ops: TorchOps) -> tuple[type, type]:
    """VGG and AlexNet (a conv stack, a pool, the FC head) on the framework's Module."""
    nn = ops.nn
    Module: Any = nn.Module

    def classifier(
        in_features: int, fc: tuple[int, ...], num_classes: int, dropout: float, dropout_last: bool = False
    ) -> Any:
        """The FC head of VGG (dropout after each ReLU) and AlexNet (dropout before each hidden Linear)."""
        layers = []
        for width in fc:
            if not dropout_last:
                layers.append(nn.Dropout(dropout))
            layers += [nn.Linear(in_features, width), ops.relu_layer()]
            if dropout_last:
                layers.append(nn.Dropout(dropout))
            in_features = width
        return nn.Sequential(*layers, nn.Linear(in_features, num_classes))

    class Plain(Module):
        """A conv stack, an adaptive average pool to the table's grid, the FC head (VGG and AlexNet)."""

        def __init__(
            self, layers: list[Any], channels: int, arch: VggArch | AlexNetArch, num_classes: int, dropout_last: bool
        ) -> None:
            super().__init__()
            self.features = nn.Sequential(*layers)
            self.avgpool = ops.adaptive_pool_layer(arch.pool)
            self.classifier = classifier(channels * arch.pool**2, arch.fc, num_classes, arch.dropout, dropout_last)
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


def _inception_v3(ops: TorchOps) -> type:
    """Inception v3 (torchvision's layout, its auxiliary head) on the framework's Module."""
    nn = ops.nn
    Module: Any = nn.Module

    class BasicConv2d(Module):
        """Bias-free conv, batch norm (eps 1e-3), ReLU."""

        def __init__(
            self,
            in_ch: int,
            out_ch: int,
            kernel_size: int | tuple[int, int],
            stride: int = 1,
            padding: int | tuple[int, int] = 0,
        ) -> None:
            super().__init__()
            self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False)
            self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

        def forward(self, x: Any) -> Any:
            return ops.relu(self.bn(self.conv(x)))

    def conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0) -> Any:
        return BasicConv2d(in_ch, out_ch, kernel, stride, padding)

    def c7(in_ch: int, out_ch: int, horizontal: bool) -> Any:
        """A 1x7 (horizontal) or 7x1 factorised conv with 'same' padding."""
        return BasicConv2d(in_ch, out_ch, (1, 7) if horizontal else (7, 1), padding=(0, 3) if horizontal else (3, 0))

    def c3(in_ch: int, out_ch: int, horizontal: bool) -> Any:
        """A 1x3 (horizontal) or 3x1 conv with 'same' padding."""
        return BasicConv2d(in_ch, out_ch, (1, 3) if horizontal else (3, 1), padding=(0, 1) if horizontal else (1, 0))

    def avg3(x: Any) -> Any:
        return ops.avg_pool(x, 3, stride=1, padding=1)

    class InceptionA(Module):
        """35x35 block: 1x1, 5x5, double 3x3 and pooled branches."""

        def __init__(self, in_ch: int, pool_features: int) -> None:
            super().__init__()
            self.b1x1 = conv(in_ch, 64, 1)
            self.b5x5 = nn.Sequential(conv(in_ch, 48, 1), conv(48, 64, 5, padding=2))
            self.b3x3dbl = nn.Sequential(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1))
            self.bpool = conv(in_ch, pool_features, 1)

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b1x1(x), self.b5x5(x), self.b3x3dbl(x), self.bpool(avg3(x))])

    class InceptionB(Module):
        """Grid reduction 35 -> 17: strided 3x3, strided double 3x3, max-pool."""

        def __init__(self, in_ch: int) -> None:
            super().__init__()
            self.b3x3 = conv(in_ch, 384, 3, stride=2)
            self.b3x3dbl = nn.Sequential(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, stride=2))

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b3x3(x), self.b3x3dbl(x), ops.max_pool(x, 3, stride=2)])

    class InceptionC(Module):
        """17x17 block with factorised 7x7 convolutions (c7 channels inside)."""

        def __init__(self, in_ch: int, ch: int) -> None:
            super().__init__()
            self.b1x1 = conv(in_ch, 192, 1)
            self.b7x7 = nn.Sequential(conv(in_ch, ch, 1), c7(ch, ch, True), c7(ch, 192, False))
            self.b7x7dbl = nn.Sequential(
                conv(in_ch, ch, 1), c7(ch, ch, False), c7(ch, ch, True), c7(ch, ch, False), c7(ch, 192, True)
            )
            self.bpool = conv(in_ch, 192, 1)

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b1x1(x), self.b7x7(x), self.b7x7dbl(x), self.bpool(avg3(x))])

    class InceptionD(Module):
        """Grid reduction 17 -> 8: strided 3x3, 7x7-then-strided-3x3, max-pool."""

        def __init__(self, in_ch: int) -> None:
            super().__init__()
            self.b3x3 = nn.Sequential(conv(in_ch, 192, 1), conv(192, 320, 3, stride=2))
            self.b7x7x3 = nn.Sequential(
                conv(in_ch, 192, 1), c7(192, 192, True), c7(192, 192, False), conv(192, 192, 3, stride=2)
            )

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b3x3(x), self.b7x7x3(x), ops.max_pool(x, 3, stride=2)])

    class InceptionE(Module):
        """8x8 block with the expanded 1x3 / 3x1 branches."""

        def __init__(self, in_ch: int) -> None:
            super().__init__()
            self.b1x1 = conv(in_ch, 320, 1)
            self.b3x3_1 = conv(in_ch, 384, 1)
            self.b3x3_2a, self.b3x3_2b = c3(384, 384, True), c3(384, 384, False)
            self.b3x3dbl_1 = nn.Sequential(conv(in_ch, 448, 1), conv(448, 384, 3, padding=1))
            self.b3x3dbl_3a, self.b3x3dbl_3b = c3(384, 384, True), c3(384, 384, False)
            self.bpool = conv(in_ch, 192, 1)

        def forward(self, x: Any) -> Any:
            a = self.b3x3_1(x)
            d = self.b3x3dbl_1(x)
            return ops.cat(
                [
                    self.b1x1(x),
                    self.b3x3_2a(a),
                    self.b3x3_2b(a),
                    self.b3x3dbl_3a(d),
                    self.b3x3dbl_3b(d),
                    self.bpool(avg3(x)),
                ]
            )

    class InceptionAux(Module):
        """Auxiliary classifier on the 17x17 grid: 5x5/3 average pool, 1x1 (128), 5x5 (768), fc."""

        def __init__(self, in_ch: int, num_classes: int) -> None:
            super().__init__()
            self.conv0 = conv(in_ch, 128, 1)
            self.conv1 = conv(128, 768, 5)
            self.fc = nn.Linear(768, num_classes)

        def forward(self, x: Any) -> Any:
            # torchvision's 5x5/3 pool needs a >= 17x17 grid (inputs near 299); smaller inputs pool to 5x5.
            x = ops.avg_pool(x, 5, stride=3) if min(x.shape[-2:]) >= 17 else ops.adaptive_pool(x, 5)
            return self.fc(ops.flatten(ops.adaptive_pool(self.conv1(self.conv0(x)), 1)))

    class InceptionV3(Module):
        """Inception v3 (torchvision ``Inception3`` layout) with the auxiliary head.

        In training mode (with the aux head) forward returns ``(logits, aux_logits)``, else ``logits``.
        """

        def __init__(self, arch: InceptionArch, num_classes: int = 1000) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                conv(3, 32, 3, stride=2),
                conv(32, 32, 3),
                conv(32, 64, 3, padding=1),
                nn.MaxPool2d(3, stride=2),
                conv(64, 80, 1),
                conv(80, 192, 3),
                nn.MaxPool2d(3, stride=2),
                InceptionA(192, 32),
                InceptionA(256, 64),
                InceptionA(288, 64),
                InceptionB(288),
                InceptionC(768, 128),
                InceptionC(768, 160),
                InceptionC(768, 160),
                InceptionC(768, 192),
            )
            self.aux = InceptionAux(768, num_classes) if arch.aux_logits else None
            self.tail = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
            self.avgpool = ops.adaptive_pool_layer(1)
            self.dropout = nn.Dropout(arch.dropout)
            self.fc = nn.Linear(2048, num_classes)
            _init_cnn(ops, self)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            aux = self.aux(x) if self.aux is not None and self.training else None
            logits = self.fc(self.dropout(ops.flatten(self.avgpool(self.tail(x)))))
            return logits if aux is None else (logits, aux)

    return InceptionV3
