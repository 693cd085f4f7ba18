"""Jittor models for the benchmark's cases and their losses, each with the case's exact parameter count.

The CNNs are ``jittor.models``' classes (torchvision's layouts: its ResNet strides the 3x3 conv, so it is
v1.5), built from the case's architecture table where the zoo takes one (ResNet's stages, VGG's layer list) and
checked against it where it does not (AlexNet's convolutions, the heads). Inception v3 is the zoo's ``Inception3`` with its own auxiliary head, trained through the zoo's
``_forward`` (its ``execute`` drops the aux logits); the aux head pools adaptively on the small grids of
test inputs, as the torch backend's does. The Llama family is llama.py's. BERT is written here, laid out like HF ``BertForPreTraining``
with the MLM decoder tied to the word embeddings and the masked-LM head run on the gathered masked positions
only, as Google's pre-training does. ``MODELS`` is the only place a case is named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jittor as jt
from jittor import nn
from jittor.models.alexnet import AlexNet
from jittor.models.inception import (
    BasicConv2d,
    Inception3,
    InceptionA,
    InceptionAux,
    InceptionB,
    InceptionC,
    InceptionD,
    InceptionE,
)
from jittor.models.resnet import Bottleneck, ResNet
from jittor.models.vgg import VGG, make_layers

from dlbench.backends.decoder import LLAMA_MEMBERS
from dlbench.backends.jittor.llama import LlamaModel
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, InceptionArch, ResNetArch, VggArch
from dlbench.cases.llama import llama_arch

# ----------------------------------------------------------------------------------------------- ResNet


def resnet(arch: ResNetArch, classes: int) -> nn.Module:
    """The zoo's bottleneck ResNet (v1.5) with the case's blocks per stage."""
    block = Bottleneck
    if arch.width != 64 or arch.expansion != block.expansion or not arch.stride_on_3x3:
        raise ValueError(f"jittor's zoo ResNet has width 64, expansion {block.expansion} and v1.5 strides: {arch}")
    return ResNet(block, list(arch.stages), num_classes=classes)


# ------------------------------------------------------------------------------------- VGG and AlexNet


class GridPool(nn.Module):
    """torch's AdaptiveAvgPool2d, which also enlarges a grid (Jittor's divides by zero below the output size)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def execute(self, x: jt.Var) -> jt.Var:
        h, w, n = x.shape[2], x.shape[3], self.size
        if h >= n and w >= n:
            return nn.AdaptiveAvgPool2d(n)(x)
        rows = []
        for i in range(n):
            r0, r1 = i * h // n, -(-(i + 1) * h // n)
            cells = [x[:, :, r0:r1, j * w // n : -(-(j + 1) * w // n)].mean(dims=(2, 3)) for j in range(n)]
            rows.append(jt.stack(cells, dim=2))
        return jt.stack(rows, dim=2)


def _check_head(arch: VggArch | AlexNetArch, zoo_pool: int) -> None:
    """The zoo's heads have a fixed pool grid, two 4096 FC layers and p=0.5 dropout: refuse any other table."""
    if (arch.pool, arch.fc, arch.dropout) != (zoo_pool, (4096, 4096), 0.5):
        raise ValueError(f"jittor's zoo head is a {zoo_pool}x{zoo_pool} pool, 4096-4096 FC, dropout 0.5: {arch}")


def vgg(arch: VggArch, classes: int, native: bool) -> nn.Module:
    """The zoo's VGG over the case's layer list; off the native input size its head pool may enlarge a grid."""
    _check_head(arch, 7)
    layers = ["M" if v == POOL else int(v) for v in arch.layers]
    model = VGG(make_layers(layers, batch_norm=arch.batch_norm), num_classes=classes)
    if not native:
        model.avgpool = GridPool(arch.pool)
    return model


def alexnet(arch: AlexNetArch, classes: int, native: bool) -> nn.Module:
    """The zoo's AlexNet, checked to have the case's convolutions; off the native size as vgg()."""
    _check_head(arch, 6)
    model = AlexNet(num_classes=classes)
    convs = [(c.out, c.kernel, c.stride, c.padding) for c in arch.convs]
    zoo = [
        (m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0]) for m in model.features if isinstance(m, nn.Conv)
    ]
    if convs != zoo:
        raise ValueError(f"jittor's zoo AlexNet has convolutions {zoo}, the case {convs}")
    if not native:
        model.avgpool = GridPool(arch.pool)
    return model


# ------------------------------------------------------------------------------------------ Inception v3


class SmallGridAux(InceptionAux):
    """The zoo's auxiliary head; below the 17x17 grid of a 299 input it pools to 5x5 adaptively."""

    def execute(self, x: jt.Var) -> jt.Var:
        if min(x.shape[-2:]) >= 17:
            return super().execute(x)
        x = self.conv1(self.conv0(nn.AdaptiveAvgPool2d(5)(x)))
        x = nn.AdaptiveAvgPool2d(1)(x)
        return self.fc(jt.reshape(x, (x.shape[0], -1)))


def inception_v3(arch: InceptionArch, classes: int) -> Inception3:
    """The zoo's Inception v3 with the auxiliary head (training uses ``model._forward`` for both logits)."""
    if not arch.aux_logits or arch.dropout != 0.5:
        raise ValueError(f"jittor's zoo Inception v3 is built with its aux head and dropout 0.5: {arch}")
    blocks = [BasicConv2d, InceptionA, InceptionB, InceptionC, InceptionD, InceptionE, SmallGridAux]
    return Inception3(num_classes=classes, aux_logits=True, inception_blocks=blocks)


# ------------------------------------------------------------------------------------------------- BERT


def _linear(cin: int, cout: int, std: float) -> nn.Linear:
    """A Linear layer with BERT's normal(0, std) weights and zero bias."""
    layer = nn.Linear(cin, cout)
    layer.weight = jt.init.gauss((cout, cin), "float32", 0.0, std)
    layer.bias = jt.init.constant((cout,), "float32", 0.0)
    return layer


def _embedding(num: int, dim: int, std: float) -> nn.Embedding:
    """An embedding table with normal(0, std) rows."""
    emb = nn.Embedding(num, dim)
    emb.weight = jt.init.gauss((num, dim), "float32", 0.0, std)
    return emb


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer: fused-QKV self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h, std = cfg.hidden_size, cfg.initializer_range
        self.heads, self.head_dim = cfg.num_heads, h // cfg.num_heads
        self.qkv = _linear(h, 3 * h, std)
        self.attn_out = _linear(h, h, std)
        self.attn_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.intermediate = _linear(h, cfg.intermediate_size, std)
        self.output = _linear(cfg.intermediate_size, h, std)
        self.out_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.attn_dropout = nn.Dropout(cfg.dropout)

    def execute(self, x: jt.Var, mask_bias: jt.Var) -> jt.Var:
        b, s, h = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, heads, S, d]
        scores = jt.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(self.head_dim) + mask_bias
        ctx = jt.matmul(self.attn_dropout(nn.softmax(scores, dim=-1)), v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        ff = self.output(nn.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(ff))


class BertForPretraining(nn.Module):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BertConfig()
        h, std = cfg.hidden_size, cfg.initializer_range
        self.word_embeddings = _embedding(cfg.vocab_size, h, std)
        self.position_embeddings = _embedding(cfg.max_position_embeddings, h, std)
        self.token_type_embeddings = _embedding(cfg.type_vocab_size, h, std)
        self.embed_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([BertLayer(cfg) for _ in range(cfg.num_layers)])
        self.pooler = _linear(h, h, std)
        self.mlm_transform = _linear(h, h, std)
        self.mlm_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.mlm_bias = jt.zeros(cfg.vocab_size)
        self.nsp = _linear(h, 2, std)

    def execute(
        self, input_ids: jt.Var, token_type_ids: jt.Var, attention_mask: jt.Var, mlm_positions: jt.Var
    ) -> tuple[jt.Var, jt.Var]:
        """MLM logits [B, P, vocab] at the masked positions [B, P] and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        b, s = input_ids.shape
        positions = jt.arange(s).int32()
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions).unsqueeze(0)
        x = self.embed_dropout(self.embed_norm(x + self.token_type_embeddings(token_type_ids)))
        mask_bias = ((1.0 - attention_mask.float32()) * -1e4).reshape(b, 1, 1, s)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = jt.tanh(self.pooler(x[:, 0]))
        p = mlm_positions.shape[1]
        index = mlm_positions.reshape(b, p, 1).broadcast((b, p, x.shape[-1]))
        masked = jt.gather(x, 1, index)  # [B, P, hidden]
        hidden = self.mlm_norm(nn.gelu(self.mlm_transform(masked)))
        mlm_logits = jt.matmul(hidden, self.word_embeddings.weight.transpose()) + self.mlm_bias  # tied decoder
        return mlm_logits, self.nsp(pooled)


# ------------------------------------------------------------------------------------- losses and registry


def _image(case: Case, side: int | None) -> tuple[int, bool]:
    """(classes, whether the model sees the case's native image size)."""
    assert isinstance(case.input, ImageInput)
    return case.input.classes, side in (None, case.input.size)


Builder = Callable[[Case, int | None], nn.Module]

# The model table: case name -> builder(case, image side) reading the case's architecture. The only place a case
# is named.
MODELS: dict[str, Builder] = {
    "resnet50": lambda c, side: resnet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "resnet152": lambda c, side: resnet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "vgg16": lambda c, side: vgg(c.arch, *_image(c, side)),  # type: ignore[arg-type]
    "alexnet": lambda c, side: alexnet(c.arch, *_image(c, side)),  # type: ignore[arg-type]
    "inception_v3": lambda c, side: inception_v3(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "bert_base": lambda c, side: BertForPretraining(c.arch),  # type: ignore[arg-type]
    **dict.fromkeys(LLAMA_MEMBERS, lambda c, side: LlamaModel(llama_arch(c))),
}


def build_model(case: Case, side: int | None = None) -> nn.Module:
    """A freshly initialised model for the case; side is the image side it will see (default native)."""
    return MODELS[case.name](case, side)


def _weighted_xent(logits: jt.Var, labels: jt.Var, weights: jt.Var) -> jt.Var:
    """Cross-entropy of each prediction, weighted (0 for padding), over the sum of weights (Google's BERT)."""
    flat = logits.reshape(-1, logits.shape[-1])
    each = nn.cross_entropy_loss(flat, labels.reshape(-1), reduction="none")
    w = weights.reshape(-1).float32()
    return (each * w).sum() / (w.sum() + 1e-5)


def train_loss(case: Case, model: nn.Module, batch: Sequence[jt.Var]) -> jt.Var:
    """The case's training loss on one batch: cross-entropy (+ aux_weight x the auxiliary head's), MLM + NSP
    (batch in BERT_KEYS order), or a decoder's mean next-token cross-entropy over every position (input_ids,
    labels)."""
    if case.loss.kind == "causal_lm":
        logits = model(batch[0])
        return nn.cross_entropy_loss(logits.reshape(-1, logits.shape[-1]), batch[1].reshape(-1))
    if case.loss.kind == "mlm_nsp":
        mlm_logits, nsp_logits = model(batch[0], batch[1], batch[2], batch[3])
        return _weighted_xent(mlm_logits, batch[4], batch[5]) + nn.cross_entropy_loss(nsp_logits, batch[6])
    if case.loss.aux_weight:
        logits, aux = model._forward(batch[0])  # the zoo's execute() returns only the main logits
        return nn.cross_entropy_loss(logits, batch[1]) + case.loss.aux_weight * nn.cross_entropy_loss(aux, batch[1])
    return nn.cross_entropy_loss(model(batch[0]), batch[1])


def count_trainable(model: nn.Module) -> int:
    """Trainable parameters (running statistics are stop-grad); a tied parameter is one Var, counted once."""
    return sum(int(p.numel()) for p in model.parameters() if not p.is_stop_grad())


__all__ = [
    "MODELS",
    "BertForPretraining",
    "SmallGridAux",
    "alexnet",
    "build_model",
    "count_trainable",
    "inception_v3",
    "resnet",
    "train_loss",
    "vgg",
]
