"""Gluon definitions of the benchmark's models and their losses, each with the case's exact parameter count.

Every builder reads the case's architecture table (``case.arch``); ``MODELS`` is the only place a case is named.
ResNet, VGG and AlexNet are written here from the table (with the Gluon zoo's initialisers: the zoo's
``resnet50_v1`` strides the 1x1 conv and biases its convs, it is not v1.5). Inception v3 is the zoo's network
with the auxiliary head the case trains (the zoo's omits it). BERT is written here, laid out like HF
``BertForPreTraining`` with the MLM decoder tied to the word embeddings; its masked-LM head runs on the gathered
masked positions only, as Google's pre-training does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mxnet as mx
import numpy as np
from mxnet.gluon import HybridBlock, nn
from mxnet.gluon import loss as gloss
from mxnet.gluon.model_zoo import vision
from mxnet.gluon.model_zoo.vision.inception import _make_basic_conv

from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, InceptionArch, ResNetArch, VggArch

# ---------------------------------------------------------------------------------------------- ResNet


class Bottleneck(HybridBlock):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), residual."""

    def __init__(self, in_ch: int, width: int, stride: int, expansion: int) -> None:
        super().__init__()
        out_ch = width * expansion
        self.body = nn.HybridSequential()
        self.body.add(
            nn.Conv2D(width, 1, use_bias=False, in_channels=in_ch),
            nn.BatchNorm(in_channels=width),
            nn.Activation("relu"),
            nn.Conv2D(width, 3, strides=stride, padding=1, use_bias=False, in_channels=width),
            nn.BatchNorm(in_channels=width),
            nn.Activation("relu"),
            nn.Conv2D(out_ch, 1, use_bias=False, in_channels=width),
            nn.BatchNorm(in_channels=out_ch),
        )
        self.downsample: nn.HybridSequential | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.HybridSequential()
            self.downsample.add(
                nn.Conv2D(out_ch, 1, strides=stride, use_bias=False, in_channels=in_ch),
                nn.BatchNorm(in_channels=out_ch),
            )

    def hybrid_forward(self, F, x):
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(self.body(x) + identity)


class ResNet(HybridBlock):
    """Bottleneck ResNet v1.5: 7x7 stem, max-pool, four stages, global average pool, fc."""

    def __init__(self, arch: ResNetArch, classes: int) -> None:
        super().__init__()
        if not arch.stride_on_3x3:
            raise ValueError("dlbench's Gluon ResNet is v1.5 (stride on the 3x3 conv)")
        w = arch.width
        self.features = nn.HybridSequential()
        self.features.add(
            nn.Conv2D(w, 7, strides=2, padding=3, use_bias=False, in_channels=3),
            nn.BatchNorm(in_channels=w),
            nn.Activation("relu"),
            nn.MaxPool2D(3, 2, 1),
        )
        in_ch = w
        for i, blocks in enumerate(arch.stages):
            for j in range(blocks):
                self.features.add(Bottleneck(in_ch, w * 2**i, 2 if (i > 0 and j == 0) else 1, arch.expansion))
                in_ch = w * 2**i * arch.expansion
        self.features.add(nn.GlobalAvgPool2D())
        # torch's default Linear init, U(+-1/sqrt(fan_in)), as the torch backend's fc has
        self.output = nn.Dense(
            classes,
            in_units=in_ch,
            weight_initializer=mx.init.Uniform(1 / math.sqrt(in_ch)),
            bias_initializer=mx.init.Uniform(1 / math.sqrt(in_ch)),
        )

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


# ------------------------------------------------------------------------- VGG, AlexNet (from the table)


class AdaptiveAvgPool(HybridBlock):
    """Average-pool to a fixed grid (torch's AdaptiveAvgPool2d), so that small test inputs keep the head's shape."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def hybrid_forward(self, F, x):
        return F.contrib.AdaptiveAvgPooling2D(x, output_size=self.size)


def _head(
    features: nn.HybridSequential, fc: tuple[int, ...], dropout: float, classes: int, weight_init: str | None
) -> nn.Dense:
    """The FC head after the convolutions (ReLU + dropout after each hidden layer), as the Gluon zoo writes it."""
    init = {"weight_initializer": weight_init, "bias_initializer": "zeros"} if weight_init else {}
    for units in fc:
        features.add(nn.Dense(units, activation="relu", **init), nn.Dropout(rate=dropout))
    return nn.Dense(classes, **init)


class ConvNet(HybridBlock):
    """Convolutions, an adaptive pool to the head's grid when the input is off the native size, the FC head."""

    def __init__(
        self,
        convs: list[HybridBlock],
        grid: int,
        resize: bool,
        fc: tuple[int, ...],
        dropout: float,
        classes: int,
        weight_init: str | None,
    ) -> None:
        super().__init__()
        self.features = nn.HybridSequential()
        self.features.add(*convs)
        if resize:  # at the native size the convolutions already end on grid x grid
            self.features.add(AdaptiveAvgPool(grid))
        self.features.add(nn.Flatten())
        self.output = _head(self.features, fc, dropout, classes, weight_init)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def vgg(arch: VggArch, classes: int, resize: bool) -> ConvNet:
    """VGG from its layer table: 3x3 convs (ReLU) with 2x2 max-pools at the POOL marks (the zoo's initialisers)."""
    if arch.batch_norm:
        raise ValueError("dlbench's Gluon VGG has no batch-norm variant")
    conv_init = mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2)
    convs: list[HybridBlock] = []
    for layer in arch.layers:
        if layer == POOL:
            convs.append(nn.MaxPool2D(strides=2))
        else:
            convs.append(nn.Conv2D(int(layer), 3, padding=1, weight_initializer=conv_init, bias_initializer="zeros"))
            convs.append(nn.Activation("relu"))
    return ConvNet(convs, arch.pool, resize, arch.fc, arch.dropout, classes, "normal")


def alexnet(arch: AlexNetArch, classes: int, resize: bool) -> ConvNet:
    """AlexNet from its convolution table (ReLU after each, 3x3/2 max-pools where marked)."""
    convs: list[HybridBlock] = []
    for c in arch.convs:
        convs.append(nn.Conv2D(c.out, c.kernel, strides=c.stride, padding=c.padding, activation="relu"))
        if c.pool_after:
            convs.append(nn.MaxPool2D(pool_size=3, strides=2))
    return ConvNet(convs, arch.pool, resize, arch.fc, arch.dropout, classes, None)


class InceptionV3(HybridBlock):
    """The zoo's Inception v3 split at the 17x17 grid, where the auxiliary classifier reads; returns both logits."""

    def __init__(self, arch: InceptionArch, classes: int, side: int) -> None:
        super().__init__()
        if not arch.aux_logits or arch.dropout != 0.5:
            raise ValueError(
                "the Gluon zoo's Inception v3 has dropout 0.5 and dlbench adds the aux head: "
                "other settings are not built"
            )
        zoo = vision.inception_v3(classes=classes)
        blocks = list(zoo.features._children.values())
        if len(blocks) != 20 or not isinstance(blocks[18], nn.AvgPool2D):
            raise RuntimeError("unexpected layout of mxnet's model-zoo Inception3; cannot attach the aux head")
        self.stem = nn.HybridSequential()
        self.stem.add(*blocks[:15])  # through Mixed_6e (C4): 768 channels on the 17x17 grid
        self.aux = nn.HybridSequential()
        # torchvision's 5x5/3 pool needs the 17x17 grid of a 299 input; smaller test inputs pool to 5x5.
        self.aux.add(
            nn.AvgPool2D(pool_size=5, strides=3) if side >= 299 else AdaptiveAvgPool(5),
            _make_basic_conv(channels=128, kernel_size=1),
            _make_basic_conv(channels=768, kernel_size=5),
            nn.GlobalAvgPool2D(),
            nn.Dense(classes, in_units=768),
        )
        self.tail = nn.HybridSequential()
        self.tail.add(*blocks[15:18], nn.GlobalAvgPool2D(), nn.Dropout(0.5))  # the zoo's 8x8 pool, any input size
        self.output = zoo.output

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        return self.output(self.tail(x)), self.aux(x)


# ------------------------------------------------------------------------------------------------- BERT


def _dense(units: int, in_units: int, cfg: BertConfig) -> nn.Dense:
    """A per-token Dense layer with BERT's normal(0, 0.02) init."""
    return nn.Dense(units, in_units=in_units, flatten=False, weight_initializer=mx.init.Normal(cfg.initializer_range))


class BertLayer(HybridBlock):
    """One post-LayerNorm encoder layer: fused-QKV self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_heads, h // cfg.num_heads
        self.qkv = _dense(3 * h, h, cfg)
        self.attn_out = _dense(h, h, cfg)
        self.attn_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, in_channels=h)
        self.intermediate = _dense(cfg.intermediate_size, h, cfg)
        self.output = _dense(h, cfg.intermediate_size, cfg)
        self.out_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, in_channels=h)
        self.dropout = nn.Dropout(cfg.dropout)
        self.attn_dropout = nn.Dropout(cfg.dropout)

    def hybrid_forward(self, F, x, mask_bias):
        qkv = F.transpose(F.reshape(self.qkv(x), shape=(0, 0, 3 * self.heads, -1)), axes=(0, 2, 1, 3))
        q, k, v = (F.reshape(t, shape=(-3, -2)) for t in F.split(qkv, num_outputs=3, axis=1))  # [B*heads, S, d]
        scores = F.batch_dot(q, k, transpose_b=True) / math.sqrt(self.head_dim)
        scores = F.broadcast_add(F.reshape(scores, shape=(-4, -1, self.heads, -2)), mask_bias)  # [B, heads, S, S]
        attn = self.attn_dropout(F.softmax(scores, axis=-1))
        ctx = F.batch_dot(F.reshape(attn, shape=(-3, -2)), v)
        ctx = F.reshape(
            F.transpose(F.reshape(ctx, shape=(-4, -1, self.heads, -2)), axes=(0, 2, 1, 3)), shape=(0, 0, -1)
        )
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        ff = self.output(F.LeakyReLU(self.intermediate(x), act_type="gelu"))
        return self.out_norm(x + self.dropout(ff))


class BertForPretraining(HybridBlock):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BertConfig()
        self.cfg = cfg
        h, init = cfg.hidden_size, mx.init.Normal(cfg.initializer_range)
        with self.name_scope():
            self.word_weight = self.params.get("word_embed_weight", shape=(cfg.vocab_size, h), init=init)
            self.mlm_bias = self.params.get("mlm_bias", shape=(cfg.vocab_size,), init="zeros")
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, h, weight_initializer=init)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, h, weight_initializer=init)
        self.embed_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, in_channels=h)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.HybridSequential()
        for _ in range(cfg.num_layers):
            self.layers.add(BertLayer(cfg))
        self.pooler = _dense(h, h, cfg)
        self.mlm_transform = _dense(h, h, cfg)
        self.mlm_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, in_channels=h)
        self.nsp = _dense(2, h, cfg)

    def hybrid_forward(self, F, input_ids, token_type_ids, attention_mask, mlm_positions, word_weight, mlm_bias):
        """MLM logits [B, P, vocab] at the masked positions [B, P] and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        cfg = self.cfg
        words = F.Embedding(input_ids, word_weight, input_dim=cfg.vocab_size, output_dim=cfg.hidden_size)
        positions = self.position_embeddings(F.contrib.arange_like(input_ids, axis=1))
        x = F.broadcast_add(words, F.expand_dims(positions, axis=0)) + self.token_type_embeddings(token_type_ids)
        x = self.embed_dropout(self.embed_norm(x))
        mask_bias = F.reshape((1 - attention_mask) * -1e4, shape=(0, 1, 1, -1))
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = F.tanh(self.pooler(F.squeeze(F.slice_axis(x, axis=1, begin=0, end=1), axis=1)))
        rows = F.broadcast_like(F.reshape(F.contrib.arange_like(mlm_positions, axis=0), shape=(-1, 1)), mlm_positions)
        masked = F.gather_nd(x, F.stack(rows, mlm_positions, axis=0))  # [B, P, hidden]
        hidden = self.mlm_norm(F.LeakyReLU(self.mlm_transform(masked), act_type="gelu"))
        mlm_logits = F.FullyConnected(hidden, word_weight, mlm_bias, num_hidden=cfg.vocab_size, flatten=False)
        return mlm_logits, self.nsp(pooled)


# ------------------------------------------------------------------------------------- losses and registry


class TrainLoss(HybridBlock):
    """The case's training loss around its model: cross-entropy (+ aux_weight x the auxiliary head's), or
    BERT's masked-LM (weighted over the gathered predictions, as Google's) + next-sentence loss."""

    def __init__(self, case: Case, model: HybridBlock) -> None:
        super().__init__()
        self.kind, self.aux_weight = case.loss.kind, case.loss.aux_weight
        self.model = model
        self.ce = gloss.SoftmaxCrossEntropyLoss()

    def hybrid_forward(self, F, x, *rest):
        if self.kind == "mlm_nsp":
            token_types, attention_mask, positions, mlm_ids, mlm_weights, nsp_labels = rest
            mlm_logits, nsp_logits = self.model(x, token_types, attention_mask, positions)
            each = -F.pick(F.log_softmax(mlm_logits, axis=-1), mlm_ids, axis=-1)  # [B, P]
            mlm = F.sum(each * mlm_weights) / (F.sum(mlm_weights) + 1e-5)
            return mlm + F.mean(self.ce(nsp_logits, nsp_labels))
        (labels,) = rest
        out = self.model(x)
        if self.aux_weight:
            logits, aux = out
            return F.mean(self.ce(logits, labels)) + self.aux_weight * F.mean(self.ce(aux, labels))
        return F.mean(self.ce(out, labels))


def _image(case: Case, side: int | None) -> tuple[int, bool, int]:
    """(classes, whether the input is off the native size, the side the model sees)."""
    assert isinstance(case.input, ImageInput)
    seen = side or case.input.size
    return case.input.classes, seen != case.input.size, seen


Builder = Callable[[Case, int | None], HybridBlock]

# The model table: case name -> builder(case, image side) reading the case's architecture. The only place a case
# is named.
MODELS: dict[str, Builder] = {
    "resnet50": lambda c, side: ResNet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "resnet152": lambda c, side: ResNet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "vgg16": lambda c, side: vgg(c.arch, *_image(c, side)[:2]),  # type: ignore[arg-type]
    "alexnet": lambda c, side: alexnet(c.arch, *_image(c, side)[:2]),  # type: ignore[arg-type]
    "inception_v3": lambda c, side: InceptionV3(c.arch, _image(c, side)[0], _image(c, side)[2]),  # type: ignore[arg-type]
    "bert_base": lambda c, side: BertForPretraining(c.arch),  # type: ignore[arg-type]
}


def build_model(case: Case, side: int | None = None) -> HybridBlock:
    """A fresh, uninitialised model for the case; side is the image side the model will see (default native)."""
    return MODELS[case.name](case, side)


def initialize(model: HybridBlock, ctx: mx.Context | list[mx.Context]) -> None:
    """Kaiming-normal (fan-out) weights, zero biases, BatchNorm/LayerNorm 1/0; explicit initializers win."""
    model.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2), ctx=ctx)


def count_trainable(model: HybridBlock) -> int:
    """Trainable parameters (grad_req other than 'null'); a tied parameter is one Parameter, counted once."""
    return sum(int(np.prod(p.shape)) for p in model.collect_params().values() if p.grad_req != "null")


# fmt: off
__all__ = [
    "MODELS", "BertForPretraining", "InceptionV3", "ResNet", "TrainLoss", "alexnet", "build_model",
    "count_trainable", "initialize", "vgg"
]
# fmt: on
