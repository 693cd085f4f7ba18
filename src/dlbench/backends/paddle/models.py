"""The benchmark's models in PaddlePaddle, and their losses.

Where ``paddle.vision.models`` matches the case exactly it is used as is: ResNet-50 and ResNet-152 (v1.5,
the stride on the 3x3 conv; 25,557,032 and 60,192,808 parameters) and VGG-16 (138,357,544). Two zoo
models are extended, keeping every zoo layer:

- AlexNet: paddle's has torchvision's layers and parameter count (61,100,840) but flattens the last
  feature map directly, so it only accepts 224x224 inputs; torchvision's 6x6 adaptive average pool is
  added before the classifier (an identity at 224x224), and its dropouts scale at train time as
  torchvision's do.
- Inception v3: paddle's is torchvision's ``Inception3`` without the auxiliary classifier (23,834,568);
  torchvision's aux head (5x5/3 average pool, 1x1 conv 128, 5x5 conv 768, fc) is added on the 17x17 grid
  after the last InceptionC block, giving the case's 27,161,264. Its final dropout becomes torchvision's
  (0.5, scaled at train time); the zoo keeps its batch-norm epsilon (1e-5, torchvision 1e-3), which
  changes neither the parameters nor the work.

CNN weights are re-initialised as the torch backend does (Kaiming-normal fan-out convs, BN 1/0), so that
every framework starts from the same distribution. BERT lives in ``bert.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn
from paddle.vision import models as zoo
from paddle.vision.models.inceptionv3 import InceptionC, InceptionD
from paddle.vision.ops import ConvNormActivation

from dlbench.backends.paddle.bert import BertConfig, BertForPretraining
from dlbench.cases import get_case


class AlexNet(zoo.AlexNet):
    """paddle.vision's AlexNet with torchvision's 6x6 adaptive average pool and train-time-scaled dropout."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__(num_classes=num_classes)
        # The zoo's "downscale_in_infer" dropout halves activations at inference instead of doubling them
        # in training; paddle's default mode is torchvision's.
        self._drop1, self._drop2 = nn.Dropout(0.5), nn.Dropout(0.5)

    def forward(self, inputs: Tensor) -> Tensor:
        x = F.relu(self._conv3(self._conv2(self._conv1(inputs))))
        x = self._conv5(F.relu(self._conv4(x)))
        x = paddle.flatten(F.adaptive_avg_pool2d(x, 6), start_axis=1)
        x = self._fc7(self._drop2(F.relu(self._fc6(self._drop1(x)))))
        return self._fc8(F.relu(x))


class InceptionAux(nn.Layer):
    """torchvision's auxiliary classifier: 5x5/3 average pool, 1x1 conv (128), 5x5 conv (768), fc."""

    def __init__(self, in_ch: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = ConvNormActivation(in_ch, 128, 1, padding=0, activation_layer=nn.ReLU)
        self.conv1 = ConvNormActivation(128, 768, 5, padding=0, activation_layer=nn.ReLU)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        # torchvision's 5x5/3 pool needs a >= 17x17 grid (inputs near 299); smaller inputs pool to 5x5.
        small = x.shape[-1] < 17 or x.shape[-2] < 17
        x = F.adaptive_avg_pool2d(x, 5) if small else F.avg_pool2d(x, 5, stride=3, exclusive=False)
        x = F.adaptive_avg_pool2d(self.conv1(self.conv0(x)), 1)
        return self.fc(paddle.flatten(x, start_axis=1))


class InceptionV3(zoo.InceptionV3):
    """paddle.vision's Inception v3 plus torchvision's auxiliary head on the 17x17 grid.

    In training mode forward returns ``(logits, aux_logits)``, else ``logits``.
    """

    AUX_AFTER = 7  # index of the last InceptionC block in the zoo's block list

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__(num_classes=num_classes)
        blocks = self.inception_block_list
        if not (isinstance(blocks[self.AUX_AFTER], InceptionC) and isinstance(blocks[self.AUX_AFTER + 1], InceptionD)):
            raise RuntimeError("paddle.vision's InceptionV3 changed layout; the aux head has no 17x17 grid to tap")
        self.aux = InceptionAux(768, num_classes)
        self.dropout = nn.Dropout(0.5)  # torchvision's rate and train-time scaling (the zoo's: 0.2, at inference)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:  # type: ignore[override]
        x = self.inception_stem(x)
        aux = None
        for i, block in enumerate(self.inception_block_list):
            x = block(x)
            if i == self.AUX_AFTER and self.training:
                aux = self.aux(x)
        x = self.dropout(paddle.flatten(self.avg_pool(x), start_axis=1))
        logits = self.fc(x)
        return logits if aux is None else (logits, aux)


def _init_cnn(model: nn.Layer, linear_std: float | None = None) -> nn.Layer:
    """Kaiming-normal (fan-out, ReLU) convs, BN 1/0, zero conv biases; Linear normal(0, std) or paddle's default."""
    zeros, ones = nn.initializer.Constant(0.0), nn.initializer.Constant(1.0)
    for layer in model.sublayers():
        if isinstance(layer, nn.Conv2D):
            out_ch, _, kh, kw = layer.weight.shape
            nn.initializer.KaimingNormal(fan_in=out_ch * kh * kw)(layer.weight)
            if layer.bias is not None:
                zeros(layer.bias)
        elif isinstance(layer, nn.BatchNorm2D):
            ones(layer.weight)
            zeros(layer.bias)
        elif isinstance(layer, nn.Linear) and linear_std is not None:
            nn.initializer.Normal(0.0, linear_std)(layer.weight)
            zeros(layer.bias)
    return model


_BUILDERS: dict[str, Callable[[int], nn.Layer]] = {
    "resnet50": lambda n: _init_cnn(zoo.resnet50(num_classes=n)),
    "resnet152": lambda n: _init_cnn(zoo.resnet152(num_classes=n)),
    "vgg16": lambda n: _init_cnn(zoo.vgg16(num_classes=n), linear_std=0.01),
    "alexnet": lambda n: _init_cnn(AlexNet(num_classes=n), linear_std=0.01),
    "inception_v3": lambda n: _init_cnn(InceptionV3(num_classes=n)),
    "bert_base": lambda n: BertForPretraining(BertConfig()),
}


def canonical(case_name: str) -> str:
    """The canonical case name for a name or alias; KeyError (``UnknownCase``) if there is none."""
    return case_name if case_name in _BUILDERS else get_case(case_name).name


def build_model(case_name: str, num_classes: int = 1000) -> nn.Layer:
    """Build a freshly initialised model for a case (num_classes is ignored for BERT); KeyError if unknown."""
    name = canonical(case_name)
    if name not in _BUILDERS:
        raise KeyError(case_name)
    return _BUILDERS[name](num_classes)


def count_trainable(model: nn.Layer) -> int:
    """Trainable parameters (not stop_gradient), each distinct tensor once, so tied weights count once."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        if not p.stop_gradient:
            seen[id(p)] = int(p.size)
    return sum(seen.values())


def _xent(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy in float32 (logits may be float16 or bfloat16 under autocast)."""
    return F.cross_entropy(logits.astype("float32"), labels)


def _masked_xent(logits: Tensor, labels: Tensor, ignore_index: int = -100) -> Tensor:
    """Cross-entropy averaged over the labels that are not ignore_index.

    paddle's ``reduction="mean"`` divides by every label, ignored ones included; torch and HF divide by
    the kept ones, which is what the MLM loss means.
    """
    per_token = F.cross_entropy(logits.astype("float32"), labels, ignore_index=ignore_index, reduction="sum")
    kept = (labels != ignore_index).astype("float32").sum()
    return per_token / paddle.clip(kept, min=1.0)


class ImageLoss(nn.Layer):
    """Model plus cross-entropy on (images, labels); Inception's aux logits add 0.4x their loss."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        out = self.model(images)
        if isinstance(out, tuple):  # Inception v3 in training mode: (logits, aux_logits)
            return _xent(out[0], labels) + 0.4 * _xent(out[1], labels)
        return _xent(out, labels)


class BertLoss(nn.Layer):
    """BERT plus the pre-training loss: masked-LM cross-entropy (label -100 ignored) + next-sentence."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor,
                mlm_labels: Tensor, nsp_labels: Tensor) -> Tensor:
        mlm_logits, nsp_logits = self.model(input_ids, token_type_ids, attention_mask)
        vocab = mlm_logits.shape[-1]
        mlm = _masked_xent(mlm_logits.reshape([-1, vocab]), mlm_labels.reshape([-1]))
        return mlm + _xent(nsp_logits, nsp_labels)


def loss_layer(case_name: str, model: nn.Layer) -> nn.Layer:
    """The model wrapped with its training loss; call it with the batch's tensors in data.py's order."""
    return BertLoss(model) if canonical(case_name) == "bert_base" else ImageLoss(model)


__all__ = ["AlexNet", "InceptionV3", "build_model", "canonical", "count_trainable", "loss_layer"]
