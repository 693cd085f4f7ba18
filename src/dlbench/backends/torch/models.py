"""Pure-torch definitions of the benchmark's models (no torchvision, no transformers) and their losses.

Each model has exactly the case's reference trainable-parameter count (``dlbench.cases``): the CNNs
follow torchvision's layouts (ResNet in its v1.5 form), BERT follows HF ``BertForPreTraining``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dlbench.backends.torch.bert import BertConfig, BertForPretraining
from dlbench.cases import get_case

# ---------------------------------------------------------------------------------------------- ResNet


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), residual."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
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

    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1))
        stages: list[nn.Module] = []
        in_ch = 64
        for i, blocks in enumerate(layers):
            width = 64 * 2**i
            stage: list[nn.Module] = []
            for j in range(blocks):
                stage.append(Bottleneck(in_ch, width, stride=2 if (i > 0 and j == 0) else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        _init_cnn(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.avgpool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


# ------------------------------------------------------------------------------------- VGG and AlexNet

_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def _classifier(in_features: int, num_classes: int, dropout_last: bool = False) -> nn.Sequential:
    """The 4096-4096-classes head shared by VGG (dropout after each ReLU) and AlexNet (before each Linear)."""
    if dropout_last:  # VGG
        return nn.Sequential(
            nn.Linear(in_features, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(4096, num_classes))
    return nn.Sequential(  # AlexNet
        nn.Dropout(0.5), nn.Linear(in_features, 4096), nn.ReLU(inplace=True),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes))


class VGG16(nn.Module):
    """VGG-16 (configuration D) without batch norm; adaptive 7x7 average pool; 4096-4096 classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for v in _VGG16:
            if v == "M":
                layers.append(nn.MaxPool2d(2, stride=2))
            else:
                assert isinstance(v, int)
                layers += [nn.Conv2d(in_ch, v, 3, padding=1), nn.ReLU(inplace=True)]
                in_ch = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = _classifier(512 * 7 * 7, num_classes, dropout_last=True)
        _init_cnn(self, linear_std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AlexNet(nn.Module):
    """AlexNet in torchvision's single-tower layout (64-192-384-256-256), adaptive 6x6 average pool."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), relu(), nn.MaxPool2d(3, stride=2),
            nn.Conv2d(64, 192, 5, padding=2), relu(), nn.MaxPool2d(3, stride=2),
            nn.Conv2d(192, 384, 3, padding=1), relu(),
            nn.Conv2d(384, 256, 3, padding=1), relu(),
            nn.Conv2d(256, 256, 3, padding=1), relu(), nn.MaxPool2d(3, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = _classifier(256 * 6 * 6, num_classes)
        _init_cnn(self, linear_std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ------------------------------------------------------------------------------------------ Inception v3


class BasicConv2d(nn.Module):
    """Bias-free conv, batch norm (eps 1e-3), ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int | tuple[int, int],
                 stride: int = 1, padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


def _avg3(x: Tensor) -> Tensor:
    return F.avg_pool2d(x, 3, stride=1, padding=1)


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
        return torch.cat([self.b1x1(x), self.b5x5(x), self.b3x3dbl(x), self.bpool(_avg3(x))], 1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17: strided 3x3, strided double 3x3, max-pool."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = BasicConv2d(in_ch, 384, 3, stride=2)
        self.b3x3dbl = nn.Sequential(BasicConv2d(in_ch, 64, 1), BasicConv2d(64, 96, 3, padding=1),
                                     BasicConv2d(96, 96, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3x3(x), self.b3x3dbl(x), F.max_pool2d(x, 3, stride=2)], 1)


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
        return torch.cat([self.b1x1(x), self.b7x7(x), self.b7x7dbl(x), self.bpool(_avg3(x))], 1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8: strided 3x3, 7x7-then-strided-3x3, max-pool."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = nn.Sequential(BasicConv2d(in_ch, 192, 1), BasicConv2d(192, 320, 3, stride=2))
        self.b7x7x3 = nn.Sequential(BasicConv2d(in_ch, 192, 1), _c7(192, 192, True), _c7(192, 192, False),
                                    BasicConv2d(192, 192, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3x3(x), self.b7x7x3(x), F.max_pool2d(x, 3, stride=2)], 1)


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
        return torch.cat([self.b1x1(x), self.b3x3_2a(a), self.b3x3_2b(a),
                          self.b3x3dbl_3a(d), self.b3x3dbl_3b(d), self.bpool(_avg3(x))], 1)


class InceptionAux(nn.Module):
    """Auxiliary classifier on the 17x17 grid: 5x5/3 average pool, 1x1 (128), 5x5 (768), fc."""

    def __init__(self, in_ch: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(in_ch, 128, 1)
        self.conv1 = BasicConv2d(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        # torchvision's 5x5/3 pool needs a >= 17x17 grid (inputs near 299); smaller inputs pool to 5x5.
        x = F.avg_pool2d(x, 5, stride=3) if min(x.shape[-2:]) >= 17 else F.adaptive_avg_pool2d(x, 5)
        x = F.adaptive_avg_pool2d(self.conv1(self.conv0(x)), 1)
        return self.fc(torch.flatten(x, 1))


class InceptionV3(nn.Module):
    """Inception v3 (torchvision ``Inception3`` layout) with the auxiliary head.

    In training mode (with the aux head) forward returns ``(logits, aux_logits)``, else ``logits``.
    """

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            BasicConv2d(3, 32, 3, stride=2), BasicConv2d(32, 32, 3), BasicConv2d(32, 64, 3, padding=1),
            nn.MaxPool2d(3, stride=2), BasicConv2d(64, 80, 1), BasicConv2d(80, 192, 3), nn.MaxPool2d(3, stride=2),
            InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64), InceptionB(288),
            InceptionC(768, 128), InceptionC(768, 160), InceptionC(768, 160), InceptionC(768, 192))
        self.aux = InceptionAux(768, num_classes) if aux_logits else None
        self.tail = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, num_classes)
        _init_cnn(self)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        x = self.stem(x)
        aux = self.aux(x) if self.aux is not None and self.training else None
        x = self.dropout(torch.flatten(self.avgpool(self.tail(x)), 1))
        logits = self.fc(x)
        return logits if aux is None else (logits, aux)


# ----------------------------------------------------------------------------------- init and registry


def _init_cnn(model: nn.Module, linear_std: float | None = None) -> None:
    """Kaiming-normal (fan-out, ReLU) convs, BN 1/0, zero biases; Linear normal(0, std) or torch's default."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0.0, linear_std)
            nn.init.zeros_(m.bias)


_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "resnet50": lambda n: ResNet((3, 4, 6, 3), n),
    "resnet152": lambda n: ResNet((3, 8, 36, 3), n),
    "vgg16": VGG16,
    "alexnet": AlexNet,
    "inception_v3": lambda n: InceptionV3(n, aux_logits=True),
    "bert_base": lambda n: BertForPretraining(BertConfig()),
}


def _resolve(case_name: str) -> str:
    """The canonical case name for a name or alias; KeyError (``UnknownCase``) if there is none."""
    return case_name if case_name in _BUILDERS else get_case(case_name).name


def build_model(case_name: str, num_classes: int = 1000) -> torch.nn.Module:
    """Build a freshly initialised model for a case (num_classes is ignored for BERT); KeyError if unknown."""
    name = _resolve(case_name)
    if name not in _BUILDERS:
        raise KeyError(case_name)
    return _BUILDERS[name](num_classes)


def count_trainable(model: torch.nn.Module) -> int:
    """Number of trainable parameters, counting shared (tied) parameters once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_loss(case_name: str, model: torch.nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """The training loss of a model on one batch (cross-entropy; + 0.4 aux for Inception, MLM + NSP for BERT)."""
    if _resolve(case_name) == "bert_base":
        mlm_logits, nsp_logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(),
                              batch["mlm_labels"].reshape(-1), ignore_index=-100)
        return mlm + F.cross_entropy(nsp_logits.float(), batch["nsp_labels"])
    out = model(batch["images"])
    labels = batch["labels"]
    if isinstance(out, tuple):  # Inception v3 in training mode: (logits, aux_logits)
        logits, aux = out
        return F.cross_entropy(logits.float(), labels) + 0.4 * F.cross_entropy(aux.float(), labels)
    return F.cross_entropy(out.float(), labels)


__all__ = ["AlexNet", "BertConfig", "BertForPretraining", "InceptionV3", "ResNet", "VGG16",
           "build_model", "count_trainable", "train_loss"]
