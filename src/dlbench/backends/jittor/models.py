"""Jittor models for the benchmark's cases and their losses, each with the case's exact parameter count.

The CNNs are ``jittor.models`` as published (torchvision's layouts: its ResNet strides the 3x3 conv, so it
is v1.5). Inception v3 is the zoo's ``Inception3`` with its own auxiliary head, trained through the zoo's
``_forward`` (its ``execute`` drops the aux logits); the aux head pools adaptively on the small grids of
test inputs, as the torch backend's does. BERT is written here, laid out like HF ``BertForPreTraining``
with the MLM decoder tied to the word embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jittor as jt
from jittor import models, nn
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

from dlbench.cases import Case
from dlbench.cases.bert_base import BertConfig

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
            cells = [x[:, :, r0:r1, j * w // n:-(-(j + 1) * w // n)].mean(dims=(2, 3)) for j in range(n)]
            rows.append(jt.stack(cells, dim=2))
        return jt.stack(rows, dim=2)


def zoo_cnn(name: str, classes: int, native: bool) -> nn.Module:
    """The zoo's VGG-16 or AlexNet; off the native input size its head pool may enlarge a small grid."""
    model = models.vgg16(num_classes=classes) if name == "vgg16" else models.alexnet(num_classes=classes)
    if not native:
        model.avgpool = GridPool(7 if name == "vgg16" else 6)
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


def inception_v3(classes: int) -> Inception3:
    """The zoo's Inception v3 with the auxiliary head (training uses ``model._forward`` for both logits)."""
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

    def execute(self, input_ids: jt.Var, token_type_ids: jt.Var, attention_mask: jt.Var) -> tuple[jt.Var, jt.Var]:
        """MLM logits [B, S, vocab] and NSP logits [B, 2]; attention_mask is [B, S], 1 = attend."""
        b, s = input_ids.shape
        positions = jt.arange(s).int32()
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions).unsqueeze(0)
        x = self.embed_dropout(self.embed_norm(x + self.token_type_embeddings(token_type_ids)))
        mask_bias = ((1.0 - attention_mask.float32()) * -1e4).reshape(b, 1, 1, s)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = jt.tanh(self.pooler(x[:, 0]))
        hidden = self.mlm_norm(nn.gelu(self.mlm_transform(x)))
        mlm_logits = jt.matmul(hidden, self.word_embeddings.weight.transpose()) + self.mlm_bias  # tied decoder
        return mlm_logits, self.nsp(pooled)


# ------------------------------------------------------------------------------------- losses and registry


def build_model(case: Case, side: int | None = None) -> nn.Module:
    """A freshly initialised model for the case; side is the image side it will see (default native)."""
    classes = getattr(case.input, "classes", 1000)
    if case.name in ("resnet50", "resnet152"):
        return (models.resnet50 if case.name == "resnet50" else models.resnet152)(num_classes=classes)
    if case.name in ("vgg16", "alexnet"):
        return zoo_cnn(case.name, classes, native=side in (None, getattr(case.input, "size", None)))
    if case.name == "inception_v3":
        return inception_v3(classes)
    if case.name == "bert_base":
        return BertForPretraining(BertConfig())
    raise KeyError(case.name)


def train_loss(case_name: str, model: nn.Module, batch: Sequence[jt.Var]) -> jt.Var:
    """The training loss on one batch: cross-entropy (+ 0.4 aux for Inception), or MLM + NSP for BERT."""
    if case_name == "bert_base":
        mlm_logits, nsp_logits = model(batch[0], batch[1], batch[2])
        labels = batch[3].reshape(-1)
        mlm = nn.cross_entropy_loss(mlm_logits.reshape(-1, mlm_logits.shape[-1]), labels, ignore_index=-100)
        return mlm + nn.cross_entropy_loss(nsp_logits, batch[4])
    if case_name == "inception_v3":
        logits, aux = model._forward(batch[0])  # the zoo's execute() returns only the main logits
        return nn.cross_entropy_loss(logits, batch[1]) + 0.4 * nn.cross_entropy_loss(aux, batch[1])
    return nn.cross_entropy_loss(model(batch[0]), batch[1])


def count_trainable(model: nn.Module) -> int:
    """Trainable parameters (running statistics are stop-grad); a tied parameter is one Var, counted once."""
    return sum(int(p.numel()) for p in model.parameters() if not p.is_stop_grad())


__all__ = ["BertConfig", "BertForPretraining", "SmallGridAux", "build_model", "count_trainable", "inception_v3",
           "train_loss"]
