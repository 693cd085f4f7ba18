"""Inception v3 for torch-shaped frameworks in torchvision's layout, its auxiliary head included, one builder per
grid (35x35, 17x17, 8x8) over shared conv units; `cnn.define` puts it beside the other CNNs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases.arch import InceptionArch


@dataclass(frozen=True)
class _Units:
    """Inception's conv units on one framework: `conv` (bias-free conv, BN, ReLU), its 1x7/7x1 (`c7`) and 1x3/3x1
    (`c3`) factorised forms with 'same' padding, and the branches' 3x3/1 average pool (`avg3`)."""

    conv: Callable[..., Any]
    c7: Callable[[int, int, bool], Any]
    c3: Callable[[int, int, bool], Any]
    avg3: Callable[[Any], Any]


def _inception_units(ops: TorchOps) -> _Units:
    """BasicConv2d (torchvision's name) and the units built from it."""
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

    return _Units(conv, c7, c3, avg3)


def _inception_35(ops: TorchOps, u: _Units) -> tuple[type, type]:
    """The 35x35 block (InceptionA) and the grid reduction to 17x17 (InceptionB)."""
    nn, conv = ops.nn, u.conv
    Module: Any = nn.Module

    class InceptionA(Module):
        """35x35 block: 1x1, 5x5, double 3x3 and pooled branches."""

        def __init__(self, in_ch: int, pool_features: int) -> None:
            super().__init__()
            self.b1x1 = conv(in_ch, 64, 1)
            self.b5x5 = nn.Sequential(conv(in_ch, 48, 1), conv(48, 64, 5, padding=2))
            self.b3x3dbl = nn.Sequential(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1))
            self.bpool = conv(in_ch, pool_features, 1)

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b1x1(x), self.b5x5(x), self.b3x3dbl(x), self.bpool(u.avg3(x))])

    class InceptionB(Module):
        """Grid reduction 35 -> 17: strided 3x3, strided double 3x3, max-pool."""

        def __init__(self, in_ch: int) -> None:
            super().__init__()
            self.b3x3 = conv(in_ch, 384, 3, stride=2)
            self.b3x3dbl = nn.Sequential(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, stride=2))

        def forward(self, x: Any) -> Any:
            return ops.cat([self.b3x3(x), self.b3x3dbl(x), ops.max_pool(x, 3, stride=2)])

    return InceptionA, InceptionB


def _inception_17(ops: TorchOps, u: _Units) -> tuple[type, type]:
    """The 17x17 block with factorised 7x7 convolutions (InceptionC) and the grid reduction to 8x8 (InceptionD)."""
    nn, conv, c7 = ops.nn, u.conv, u.c7
    Module: Any = nn.Module

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
            return ops.cat([self.b1x1(x), self.b7x7(x), self.b7x7dbl(x), self.bpool(u.avg3(x))])

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

    return InceptionC, InceptionD


def _inception_8_and_aux(ops: TorchOps, u: _Units) -> tuple[type, type]:
    """The 8x8 block with expanded 1x3 / 3x1 branches (InceptionE) and the auxiliary classifier (InceptionAux)."""
    nn, conv, c3 = ops.nn, u.conv, u.c3
    Module: Any = nn.Module

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
                    self.bpool(u.avg3(x)),
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

    return InceptionE, InceptionAux


def inception_v3(ops: TorchOps, init: Callable[[TorchOps, Any], None]) -> type:
    """Inception v3 (torchvision's layout, its auxiliary head) on the framework's Module, from its blocks; `init`
    initialises the weights as the other CNNs' (cnn.py)."""
    nn = ops.nn
    Module: Any = nn.Module
    u = _inception_units(ops)
    conv = u.conv
    InceptionA, InceptionB = _inception_35(ops, u)
    InceptionC, InceptionD = _inception_17(ops, u)
    InceptionE, InceptionAux = _inception_8_and_aux(ops, u)

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
            init(ops, self)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            aux = self.aux(x) if self.aux is not None and self.training else None
            logits = self.fc(self.dropout(ops.flatten(self.avgpool(self.tail(x)))))
            return logits if aux is None else (logits, aux)

    return InceptionV3
