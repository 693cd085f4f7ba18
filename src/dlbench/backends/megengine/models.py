"""MegEngine definitions of the benchmark's models (megengine.module), built from the cases' architecture tables,
and their losses.

They follow the torch backend's layouts: the CNNs as torchvision has them (ResNet in its v1.5 form), BERT as HF
``BertForPreTraining`` (bert.py). Each model has exactly the case's reference trainable-parameter count
(``dlbench.cases``). MegEngine's BatchNorm momentum 0.9 is torch's 0.1 (it weighs the running statistic).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import megengine.functional as F
import megengine.module as nn
import numpy as np
from megengine import Tensor

from dlbench.backends.megengine.bert import BertForPretraining
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, InceptionArch, ResNetArch, VggArch

# ---------------------------------------------------------------------------------------------- ResNet


class Bottleneck(nn.Module):
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
        self.relu = nn.ReLU()
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Bottleneck ResNet (torchvision layout): 7x7 stem, max-pool, four stages, global pool, fc."""

    def __init__(self, arch: ResNetArch, num_classes: int = 1000) -> None:
        super().__init__()
        w = arch.width
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1))
        stages: list[nn.Module] = []
        in_ch = w
        for i, blocks in enumerate(arch.stages):
            width = w * 2**i
            stage: list[nn.Module] = []
            for j in range(blocks):
                stage.append(Bottleneck(in_ch, width, 2 if (i > 0 and j == 0) else 1, arch.expansion))
                in_ch = width * arch.expansion
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_ch, num_classes)
        _init_cnn(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.avgpool(self.stages(self.stem(x)))
        return self.fc(F.flatten(x, 1))


# ------------------------------------------------------------------------------------- VGG and AlexNet


def _pool_matrix(size_in: int, size_out: int) -> np.ndarray:
    """[out, in] weights of torch's adaptive average pooling along one axis: output i averages inputs
    floor(i * in / out) to ceil((i + 1) * in / out)."""
    m = np.zeros((size_out, size_in), np.float32)
    for i in range(size_out):
        lo, hi = (i * size_in) // size_out, -((-(i + 1) * size_in) // size_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool(x: Tensor, size: int) -> Tensor:
    """torch's adaptive_avg_pool2d to size x size, also from a smaller map (small test inputs): MegEngine's own
    divides by in // out, which is 0 there (a SIGFPE), so that case runs as two matmuls with the pooling weights."""
    b, c, h, w = (int(d) for d in x.shape)
    if h >= size and w >= size:
        return F.adaptive_avg_pool2d(x, (size, size))
    rows = Tensor(_pool_matrix(h, size).T)  # [h, size]
    cols = Tensor(_pool_matrix(w, size).T)  # [w, size]
    y = F.matmul(x.reshape(b * c, h, w), cols)  # [bc, h, size]
    y = F.matmul(y.transpose(0, 2, 1), rows)  # [bc, size (w), size (h)]
    return y.transpose(0, 2, 1).reshape(b, c, size, size)


class AdaptiveAvgPool(nn.Module):
    """`adaptive_avg_pool` as a module."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool(x, self.size)


def _classifier(in_features: int, fc: tuple[int, ...], num_classes: int, dropout: float,
                dropout_last: bool = False) -> nn.Sequential:
    """The FC head shared by VGG (dropout after each ReLU) and AlexNet (dropout before each hidden Linear)."""
    layers: list[nn.Module] = []
    for width in fc:
        if not dropout_last:
            layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        if dropout_last:
            layers.append(nn.Dropout(dropout))
        in_features = width
    return nn.Sequential(*layers, nn.Linear(in_features, num_classes))


class VGG(nn.Module):
    """VGG from its layer table (3x3 convs, 2x2 max-pools), adaptive average pool, FC head."""

    def __init__(self, arch: VggArch, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for v in arch.layers:
            if v == POOL:
                layers.append(nn.MaxPool2d(2, stride=2))
            else:
                assert isinstance(v, int)
                layers += [nn.Conv2d(in_ch, v, 3, padding=1), nn.ReLU()]
                in_ch = v
        self.features = nn.Sequential(*layers)
        self.avgpool = AdaptiveAvgPool(arch.pool)
        self.classifier = _classifier(in_ch * arch.pool**2, arch.fc, num_classes, arch.dropout, dropout_last=True)
        _init_cnn(self, linear_std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(F.flatten(self.avgpool(self.features(x)), 1))


class AlexNet(nn.Module):
    """AlexNet from its conv table (torchvision's single-tower layout), adaptive average pool, FC head."""

    def __init__(self, arch: AlexNetArch, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for c in arch.convs:
            layers += [nn.Conv2d(in_ch, c.out, c.kernel, stride=c.stride, padding=c.padding), nn.ReLU()]
            if c.pool_after:
                layers.append(nn.MaxPool2d(3, stride=2))
            in_ch = c.out
        self.features = nn.Sequential(*layers)
        self.avgpool = AdaptiveAvgPool(arch.pool)
        self.classifier = _classifier(in_ch * arch.pool**2, arch.fc, num_classes, arch.dropout)
        _init_cnn(self, linear_std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(F.flatten(self.avgpool(self.features(x)), 1))


# ------------------------------------------------------------------------------------------ Inception v3


class BasicConv2d(nn.Module):
    """Bias-free conv, batch norm (eps 1e-3), ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int | tuple[int, int],
                 stride: int = 1, padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)))


def _avg3(x: Tensor) -> Tensor:
    return F.avg_pool2d(x, 3, stride=1, padding=1, mode="average")  # padding counted, as torch


class InceptionA(nn.Module):
    """35x35 block: 1x1, 5x5, double 3x3 and pooled branches."""

    def __init__(self, in_ch: int, pool_features: int) -> None:
        super().__init__()
        self.b1x1 = BasicConv2d(in_ch, 64, 1)
        self.b5x5 = nn.Sequential(BasicConv2d(in_ch, 48, 1), BasicConv2d(48, 64, 5, padding=2))
        self.b3x3dbl = nn.Sequential(BasicConv2d(in_ch, 64, 1), BasicConv2d(64, 96, 3, padding=1),
                                     BasicConv2d(96, 96, 3, padding=1))
        self.bpool = BasicConv2d(in_ch, pool_features, 1)

    def forward(self, x: Tensor) -> Tensor:
        return F.concat([self.b1x1(x), self.b5x5(x), self.b3x3dbl(x), self.bpool(_avg3(x))], axis=1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17: strided 3x3, strided double 3x3, max-pool."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = BasicConv2d(in_ch, 384, 3, stride=2)
        self.b3x3dbl = nn.Sequential(BasicConv2d(in_ch, 64, 1), BasicConv2d(64, 96, 3, padding=1),
                                     BasicConv2d(96, 96, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return F.concat([self.b3x3(x), self.b3x3dbl(x), F.max_pool2d(x, 3, stride=2)], axis=1)


def _c7(in_ch: int, out_ch: int, horizontal: bool) -> BasicConv2d:
    """A 1x7 (horizontal) or 7x1 factorised conv with 'same' padding."""
    return BasicConv2d(in_ch, out_ch, (1, 7) if horizontal else (7, 1), padding=(0, 3) if horizontal else (3, 0))


class InceptionC(nn.Module):
    """17x17 block with factorised 7x7 convolutions (c7 channels inside)."""

    def __init__(self, in_ch: int, c7: int) -> None:
        super().__init__()
        self.b1x1 = BasicConv2d(in_ch, 192, 1)
        self.b7x7 = nn.Sequential(BasicConv2d(in_ch, c7, 1), _c7(c7, c7, True), _c7(c7, 192, False))
        self.b7x7dbl = nn.Sequential(BasicConv2d(in_ch, c7, 1), _c7(c7, c7, False), _c7(c7, c7, True),
                                     _c7(c7, c7, False), _c7(c7, 192, True))
        self.bpool = BasicConv2d(in_ch, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        return F.concat([self.b1x1(x), self.b7x7(x), self.b7x7dbl(x), self.bpool(_avg3(x))], axis=1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8: strided 3x3, 7x7-then-strided-3x3, max-pool."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = nn.Sequential(BasicConv2d(in_ch, 192, 1), BasicConv2d(192, 320, 3, stride=2))
        self.b7x7x3 = nn.Sequential(BasicConv2d(in_ch, 192, 1), _c7(192, 192, True), _c7(192, 192, False),
                                    BasicConv2d(192, 192, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return F.concat([self.b3x3(x), self.b7x7x3(x), F.max_pool2d(x, 3, stride=2)], axis=1)


class InceptionE(nn.Module):
    """8x8 block with the expanded 1x3 / 3x1 branches."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b1x1 = BasicConv2d(in_ch, 320, 1)
        self.b3x3_1 = BasicConv2d(in_ch, 384, 1)
        self.b3x3_2a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.b3x3_2b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.b3x3dbl_1 = nn.Sequential(BasicConv2d(in_ch, 448, 1), BasicConv2d(448, 384, 3, padding=1))
        self.b3x3dbl_3a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.b3x3dbl_3b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.bpool = BasicConv2d(in_ch, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        a = self.b3x3_1(x)
        d = self.b3x3dbl_1(x)
        return F.concat([self.b1x1(x), self.b3x3_2a(a), self.b3x3_2b(a),
                          self.b3x3dbl_3a(d), self.b3x3dbl_3b(d), self.bpool(_avg3(x))], axis=1)


class InceptionAux(nn.Module):
    """Auxiliary classifier on the 17x17 grid: 5x5/3 average pool, 1x1 (128), 5x5 (768), fc."""

    def __init__(self, in_ch: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(in_ch, 128, 1)
        self.conv1 = BasicConv2d(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        # torchvision's 5x5/3 pool needs a >= 17x17 grid (inputs near 299); smaller inputs pool to 5x5.
        x = F.avg_pool2d(x, 5, stride=3, mode="average") if min(x.shape[-2:]) >= 17 else adaptive_avg_pool(x, 5)
        x = F.adaptive_avg_pool2d(self.conv1(self.conv0(x)), (1, 1))
        return self.fc(F.flatten(x, 1))


class InceptionV3(nn.Module):
    """Inception v3 (torchvision ``Inception3`` layout) with the auxiliary head.

    In training mode (with the aux head) forward returns ``(logits, aux_logits)``, else ``logits``.
    """

    def __init__(self, arch: InceptionArch, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            BasicConv2d(3, 32, 3, stride=2), BasicConv2d(32, 32, 3), BasicConv2d(32, 64, 3, padding=1),
            nn.MaxPool2d(3, stride=2), BasicConv2d(64, 80, 1), BasicConv2d(80, 192, 3), nn.MaxPool2d(3, stride=2),
            InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64), InceptionB(288),
            InceptionC(768, 128), InceptionC(768, 160), InceptionC(768, 160), InceptionC(768, 192))
        self.aux = InceptionAux(768, num_classes) if arch.aux_logits else None
        self.tail = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(arch.dropout)
        self.fc = nn.Linear(2048, num_classes)
        _init_cnn(self)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        x = self.stem(x)
        aux = self.aux(x) if self.aux is not None and self.training else None
        x = self.dropout(F.flatten(self.avgpool(self.tail(x)), 1))
        logits = self.fc(x)
        return logits if aux is None else (logits, aux)


# ----------------------------------------------------------------------------------- init and registry


def _init_cnn(model: nn.Module, linear_std: float | None = None) -> None:
    """Kaiming-normal (fan-out, ReLU) convs, BN 1/0, zero biases; Linear normal(0, std) or MegEngine's default."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.msra_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0.0, linear_std)
            nn.init.zeros_(m.bias)


def _classes(case: Case) -> int:
    return case.input.classes if isinstance(case.input, ImageInput) else 1000


# The model table: case name -> builder reading the case's architecture. The only place a case is named.
MODELS: dict[str, Callable[[Case], nn.Module]] = {
    "resnet50": lambda c: ResNet(c.arch, _classes(c)),  # type: ignore[arg-type]
    "resnet152": lambda c: ResNet(c.arch, _classes(c)),  # type: ignore[arg-type]
    "vgg16": lambda c: VGG(c.arch, _classes(c)),  # type: ignore[arg-type]
    "alexnet": lambda c: AlexNet(c.arch, _classes(c)),  # type: ignore[arg-type]
    "inception_v3": lambda c: InceptionV3(c.arch, _classes(c)),  # type: ignore[arg-type]
    "bert_base": lambda c: BertForPretraining(c.arch),  # type: ignore[arg-type]
}


def build_model(case: Case) -> nn.Module:
    """A freshly initialised model for a case."""
    return MODELS[case.name](case)


def count_trainable(model: nn.Module) -> int:
    """Number of trainable parameters, counting shared (tied) parameters once."""
    unique = {id(p): p for p in model.parameters()}
    return sum(int(np.prod(p.shape)) for p in unique.values())


def _xent(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean softmax cross-entropy."""
    return F.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _weighted_xent(logits: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """Cross-entropy of each prediction, weighted (0 for padding), over the sum of weights (Google's BERT)."""
    each = F.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    w = weights.reshape(-1)
    return (each * w).sum() / (w.sum() + 1e-5)


def train_loss(case: Case, model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """The case's training loss on one batch: cross-entropy (+ aux_weight x the auxiliary head's), or MLM + NSP."""
    if case.loss.kind == "mlm_nsp":
        mlm_logits, nsp_logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                       batch["mlm_positions"])
        return (_weighted_xent(mlm_logits, batch["mlm_ids"], batch["mlm_weights"])
                + _xent(nsp_logits, batch["nsp_labels"]))
    out = model(batch["images"])
    labels = batch["labels"]
    if isinstance(out, tuple):  # a model with an auxiliary head, in training mode: (logits, aux_logits)
        logits, aux = out
        return _xent(logits, labels) + case.loss.aux_weight * _xent(aux, labels)
    return _xent(out, labels)


__all__ = [
    "MODELS",
    "VGG",
    "AlexNet",
    "BertForPretraining",
    "InceptionV3",
    "ResNet",
    "build_model",
    "count_trainable",
    "train_loss",
]
