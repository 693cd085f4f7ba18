"""The benchmark's models in PaddlePaddle, and their losses. `MODELS` maps each case to a builder that reads the
case's architecture (dlbench.cases.arch); a zoo model is used only where it is checked to equal that table.

``paddle.vision.models`` is used where it matches: the bottleneck ResNet (v1.5, the stride on the 3x3 conv) of
the case's depth, its stages checked against the case's (ResNet-50: 25,557,032 parameters, ResNet-152:
60,192,808) and VGG built from the case's layer table with the zoo's head checked (VGG-16: 138,357,544). Two zoo
models are extended, keeping every zoo layer:

- AlexNet: paddle's has torchvision's layers and parameter count (61,100,840), checked against the case's conv
  table, but flattens the last feature map directly, so it only accepts 224x224 inputs; torchvision's 6x6
  adaptive average pool is added before the classifier (an identity at 224x224), and its dropouts scale at
  train time as torchvision's do.
- Inception v3: paddle's is torchvision's ``Inception3`` without the auxiliary classifier (23,834,568);
  torchvision's aux head (5x5/3 average pool, 1x1 conv 128, 5x5 conv 768, fc) is added on the 17x17 grid
  after the last InceptionC block when the case has aux_logits, giving the case's 27,161,264. Its final dropout
  becomes the case's (0.5, scaled at train time), and its batch norms take torchvision's epsilon, 1e-3 (the
  zoo's 1e-5 kept the parameters and the work but not the outputs: `dlbench check same-model` found the logits
  88% apart at 75 px, batch 2).

CNN weights are re-initialised as the torch backend does (Kaiming-normal fan-out convs, BN 1/0), so that
every framework starts from the same distribution. BERT lives in ``bert.py``, the Llama family in ``llama.py`` and
the MoE family in ``moe.py`` (#46).
"""

from __future__ import annotations

from collections.abc import Callable

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn
from paddle.nn.functional.conv import _update_padding_nd
from paddle.vision import models as zoo
from paddle.vision.models.alexnet import ConvPoolLayer
from paddle.vision.models.inceptionv3 import InceptionC, InceptionD
from paddle.vision.models.resnet import BottleneckBlock
from paddle.vision.models.vgg import make_layers as make_vgg_layers
from paddle.vision.ops import ConvNormActivation

from dlbench.backends.decoder import LLAMA_MEMBERS, MOE_MEMBERS
from dlbench.backends.paddle.bert import BertForPretraining
from dlbench.backends.paddle.llama import LlamaModel
from dlbench.backends.paddle.moe import MoeModel
from dlbench.backends.paddle.wide_deep import CtrLoss, WideDeep
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import AlexNetArch, InceptionArch, ResNetArch, VggArch
from dlbench.cases.llama import llama_arch
from dlbench.cases.moe import moe_arch


class AlexNet(zoo.AlexNet):
    """paddle.vision's AlexNet with torchvision's 6x6 adaptive average pool and train-time-scaled dropout;
    its convolutions and head checked against the case's table."""

    def __init__(self, arch: AlexNetArch, num_classes: int = 1000) -> None:
        super().__init__(num_classes=num_classes)
        # The zoo's "downscale_in_infer" dropout halves activations at inference instead of doubling them
        # in training; paddle's default mode is torchvision's.
        self._drop1, self._drop2 = nn.Dropout(arch.dropout), nn.Dropout(arch.dropout)
        self.pool = arch.pool
        blocks = [self._conv1, self._conv2, self._conv3, self._conv4, self._conv5]
        zoo_table = [_conv_row(b) for b in blocks]
        if (
            zoo_table != [(c.out, c.kernel, c.stride, c.padding, c.pool_after) for c in arch.convs]
            or (self._fc6.weight.shape[1], self._fc7.weight.shape[1]) != arch.fc
            or self._fc6.weight.shape[0] != zoo_table[-1][0] * arch.pool**2
        ):
            raise RuntimeError(f"paddle.vision's AlexNet ({zoo_table}) is not the case's table {arch}")

    def forward(self, inputs: Tensor) -> Tensor:
        x = F.relu(self._conv3(self._conv2(self._conv1(inputs))))
        x = self._conv5(F.relu(self._conv4(x)))
        x = paddle.flatten(F.adaptive_avg_pool2d(x, self.pool), start_axis=1)
        x = self._fc7(self._drop2(F.relu(self._fc6(self._drop1(x)))))
        return self._fc8(F.relu(x))


def _conv_row(block: nn.Layer) -> tuple[int, int, int, int, bool]:
    """(out channels, kernel, stride, padding, max-pool after) of a zoo AlexNet block."""
    pooled = isinstance(block, ConvPoolLayer)
    conv = block._conv if pooled else block
    out, _, kernel, _ = conv.weight.shape
    return out, kernel, _first(conv._stride), _first(conv._padding), pooled


def _first(value: int | list[int] | tuple[int, ...]) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


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


INCEPTION_BN_EPSILON = 1e-3  # torchvision's BasicConv2d (and the torch backend's)


class InceptionV3(zoo.InceptionV3):
    """paddle.vision's Inception v3 plus torchvision's auxiliary head on the 17x17 grid.

    In training mode forward returns ``(logits, aux_logits)``, else ``logits``.
    """

    AUX_AFTER = 7  # index of the last InceptionC block in the zoo's block list

    def __init__(self, arch: InceptionArch, num_classes: int = 1000) -> None:
        super().__init__(num_classes=num_classes)
        blocks = self.inception_block_list
        if not (isinstance(blocks[self.AUX_AFTER], InceptionC) and isinstance(blocks[self.AUX_AFTER + 1], InceptionD)):
            raise RuntimeError("paddle.vision's InceptionV3 changed layout; the aux head has no 17x17 grid to tap")
        self.aux = InceptionAux(768, num_classes) if arch.aux_logits else None
        # torchvision's rate (the case's) and train-time scaling (the zoo's: 0.2, scaled at inference)
        self.dropout = nn.Dropout(arch.dropout)
        for layer in self.sublayers():  # torchvision's BasicConv2d epsilon (the zoo's ConvNormActivation: 1e-5)
            if isinstance(layer, nn.BatchNorm2D):
                layer._epsilon = INCEPTION_BN_EPSILON

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        x = self.inception_stem(x)
        aux = None
        for i, block in enumerate(self.inception_block_list):
            x = block(x)
            if i == self.AUX_AFTER and self.training and self.aux is not None:
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


def _resnet(arch: ResNetArch, num_classes: int) -> nn.Layer:
    """paddle.vision's bottleneck ResNet (v1.5: stride on the 3x3 conv) of the case's depth, checked stage by stage."""
    depth = 3 * sum(arch.stages) + 2  # three convs per bottleneck block, the stem conv and the classifier
    model = zoo.ResNet(BottleneckBlock, depth=depth, width=arch.width, num_classes=num_classes)
    built = tuple(len(getattr(model, f"layer{i + 1}")) for i in range(4))
    if built != arch.stages or BottleneckBlock.expansion != arch.expansion or not arch.stride_on_3x3:
        raise RuntimeError(f"paddle.vision's ResNet-{depth} has stages {built}; the case asks for {arch}")
    return _init_cnn(model)


def _vgg(arch: VggArch, num_classes: int) -> nn.Layer:
    """paddle.vision's VGG built from the case's layer table (its POOL mark is the zoo's 'M'); the zoo's head is
    checked against the case's."""
    model = zoo.vgg.VGG(make_vgg_layers(list(arch.layers), arch.batch_norm), num_classes=num_classes)
    head = [m for m in model.classifier if isinstance(m, nn.Linear)]
    drops = {m.p for m in model.classifier if isinstance(m, nn.Dropout)}
    if (
        tuple(m.weight.shape[1] for m in head[:-1]) != arch.fc
        or drops != {arch.dropout}
        or head[0].weight.shape[0] != 512 * arch.pool**2
    ):
        raise RuntimeError(f"paddle.vision's VGG head is not the case's {arch}")
    return _init_cnn(model, linear_std=0.01)


def _classes(case: Case) -> int:
    return case.input.classes if isinstance(case.input, ImageInput) else 1000


# The model table: case name -> builder reading the case's architecture. The only place a case is named.
MODELS: dict[str, Callable[[Case], nn.Layer]] = {
    "resnet50": lambda c: _resnet(c.arch, _classes(c)),  # type: ignore[arg-type]
    "resnet152": lambda c: _resnet(c.arch, _classes(c)),  # type: ignore[arg-type]
    "vgg16": lambda c: _vgg(c.arch, _classes(c)),  # type: ignore[arg-type]
    "alexnet": lambda c: _init_cnn(AlexNet(c.arch, _classes(c)), linear_std=0.01),  # type: ignore[arg-type]
    "inception_v3": lambda c: _init_cnn(InceptionV3(c.arch, _classes(c))),  # type: ignore[arg-type]
    "bert_base": lambda c: BertForPretraining(c.arch),  # type: ignore[arg-type]
    "wide_deep": WideDeep,
    **dict.fromkeys(LLAMA_MEMBERS, lambda c: LlamaModel(llama_arch(c))),
    **dict.fromkeys(MOE_MEMBERS, lambda c: MoeModel(moe_arch(c))),
}


def build_model(case: Case, layout: str = "NCHW") -> nn.Layer:
    """A freshly initialised model for a case, in the data layout asked for (NHWC: see to_nhwc)."""
    model = MODELS[case.name](case)
    return to_nhwc(model) if layout == "NHWC" else model


def to_nhwc(model: nn.Layer) -> nn.Layer:
    """The model's 2-D convolutions, batch norms and pools switched to NHWC in place (their weights keep paddle's
    OIHW layout, as paddle's own NHWC layers do); paddle.vision builds them NCHW with no data_format argument,
    so the switch sets the attributes each layer's constructor sets from its data_format. Raises if a layer with
    a layout is of a kind not switched here."""
    for layer in model.sublayers():
        if isinstance(layer, nn.Conv2D):
            layer._data_format, layer._channel_dim = "NHWC", 3
            layer._updated_padding, layer._padding_algorithm = _update_padding_nd(layer._padding, True, 2)
        elif isinstance(layer, (nn.BatchNorm2D, nn.AdaptiveAvgPool2D)):
            layer._data_format = "NHWC"
        elif isinstance(layer, nn.MaxPool2D):
            layer.data_format = "NHWC"
        elif "data_format" in vars(layer) or "_data_format" in vars(layer):
            raise RuntimeError(f"{type(layer).__name__} has a data layout to_nhwc does not switch")
    return model


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


def _weighted_xent(logits: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """Cross-entropy of each prediction, weighted (0 for padding), over the sum of weights (Google's BERT)."""
    vocab = logits.shape[-1]
    each = F.cross_entropy(logits.reshape([-1, vocab]).astype("float32"), labels.reshape([-1, 1]), reduction="none")
    w = weights.reshape([-1]).astype("float32")
    return (each.reshape([-1]) * w).sum() / (w.sum() + 1e-5)


class ImageLoss(nn.Layer):
    """Model plus cross-entropy on (images, labels); an auxiliary head's logits add aux_weight x their loss."""

    def __init__(self, model: nn.Layer, aux_weight: float) -> None:
        super().__init__()
        self.model, self.aux_weight = model, aux_weight

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        out = self.model(images)
        if isinstance(out, tuple):  # a model with an auxiliary head, in training mode: (logits, aux_logits)
            return _xent(out[0], labels) + self.aux_weight * _xent(out[1], labels)
        return _xent(out, labels)


class BertLoss(nn.Layer):
    """BERT plus the pre-training loss: Google's weighted masked-LM cross-entropy + next-sentence; takes the batch
    in dlbench.data.synthetic.BERT_KEYS order."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor,
        attention_mask: Tensor,
        mlm_positions: Tensor,
        mlm_ids: Tensor,
        mlm_weights: Tensor,
        nsp_labels: Tensor,
    ) -> Tensor:
        mlm_logits, nsp_logits = self.model(input_ids, token_type_ids, attention_mask, mlm_positions)
        return _weighted_xent(mlm_logits, mlm_ids, mlm_weights) + _xent(nsp_logits, nsp_labels)


class CausalLmLoss(nn.Layer):
    """A decoder plus its loss: the mean next-token cross-entropy over every position, and for a mixture of
    experts the case's weight x the layers' auxiliary load-balancing loss; takes (input_ids, labels)."""

    def __init__(self, model: nn.Layer, aux_weight: float) -> None:
        super().__init__()
        self.model, self.aux_weight = model, aux_weight

    def forward(self, input_ids: Tensor, labels: Tensor) -> Tensor:
        logits = self.model(input_ids)
        loss = _xent(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1]))
        if isinstance(self.model, MoeModel) and self.aux_weight:
            loss = loss + self.aux_weight * self.model.aux_loss()
        return loss


def loss_layer(case: Case, model: nn.Layer) -> nn.Layer:
    """The model wrapped with the case's training loss; call it with the batch's tensors in data.py's order."""
    if case.loss.kind == "causal_lm":
        return CausalLmLoss(model, case.loss.aux_weight)
    if case.loss.kind == "bce":
        return CtrLoss(model)
    return BertLoss(model) if case.loss.kind == "mlm_nsp" else ImageLoss(model, case.loss.aux_weight)


__all__ = ["MODELS", "AlexNet", "InceptionV3", "build_model", "count_trainable", "loss_layer", "to_nhwc"]
