"""MindSpore definitions of the benchmark's models and their losses, each with the case's exact parameter count.

MindSpore itself ships no vision or BERT models (its model zoo, mindcv, last released for MindSpore 2.2),
so all six are written here from the case's architecture table (``case.arch``) in torchvision's layouts
(ResNet in its v1.5 form) and HF ``BertForPreTraining``'s, with the MLM decoder tied to the word embeddings and
the masked-LM head run on the gathered masked positions only, as Google's pre-training does. The Llama and MoE
families (#46) are llama.py's and moe.py's. ``MODELS`` is the only place a case is named.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.common.initializer import HeNormal, Normal

from dlbench.backends.decoder import LLAMA_MEMBERS, MOE_MEMBERS
from dlbench.backends.mindspore.llama import LlamaModel
from dlbench.backends.mindspore.moe import CausalLmLoss, MoeModel
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, InceptionArch, ResNetArch, VggArch
from dlbench.cases.llama import llama_arch
from dlbench.cases.moe import moe_arch


def _conv(
    cin: int, cout: int, k: int | tuple[int, int], stride: int = 1, pad: int | tuple[int, int] = 0, bias: bool = False
) -> nn.Conv2d:
    """A conv with explicit padding (MindSpore defaults to 'same') and Kaiming-normal fan-out init."""
    kh, kw = (k, k) if isinstance(k, int) else k
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    return nn.Conv2d(
        cin,
        cout,
        (kh, kw),
        stride=stride,
        pad_mode="pad",
        padding=(ph, ph, pw, pw),
        has_bias=bias,
        weight_init=HeNormal(mode="fan_out", nonlinearity="relu"),
        bias_init="zeros",
    )


def _dense(cin: int, cout: int, std: float | None = None) -> nn.Dense:
    """A Dense layer: normal(0, std) weights and zero bias when std is given, else MindSpore's default."""
    if std is None:
        return nn.Dense(cin, cout)
    return nn.Dense(cin, cout, weight_init=Normal(std), bias_init="zeros")


# ---------------------------------------------------------------------------------------------- ResNet


class Bottleneck(nn.Cell):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), residual."""

    def __init__(self, cin: int, width: int, stride: int, expansion: int) -> None:
        super().__init__()
        cout = width * expansion
        self.body = nn.SequentialCell(
            _conv(cin, width, 1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            _conv(width, width, 3, stride, 1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            _conv(width, cout, 1),
            nn.BatchNorm2d(cout),
        )
        self.has_down = stride != 1 or cin != cout
        self.down = nn.SequentialCell(_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout)) if self.has_down else None
        self.relu = nn.ReLU()

    def construct(self, x: Tensor) -> Tensor:
        identity = self.down(x) if self.down is not None else x
        return self.relu(self.body(x) + identity)


class ResNet(nn.Cell):
    """Bottleneck ResNet v1.5: 7x7 stem, max-pool, four stages, global average pool, fc."""

    def __init__(self, arch: ResNetArch, classes: int) -> None:
        super().__init__()
        if not arch.stride_on_3x3:
            raise ValueError("dlbench's MindSpore ResNet is v1.5 (stride on the 3x3 conv)")
        w = arch.width
        cells: list[nn.Cell] = [
            _conv(3, w, 7, 2, 3),
            nn.BatchNorm2d(w),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, pad_mode="pad", padding=1),
        ]
        cin = w
        for i, blocks in enumerate(arch.stages):
            for j in range(blocks):
                cells.append(Bottleneck(cin, w * 2**i, 2 if (i > 0 and j == 0) else 1, arch.expansion))
                cin = w * 2**i * arch.expansion
        cells += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.SequentialCell(cells)
        self.fc = _dense(cin, classes)

    def construct(self, x: Tensor) -> Tensor:
        return self.fc(self.features(x))


# ------------------------------------------------------------------------------------- VGG and AlexNet


def _head(
    cells: list[nn.Cell], features: int, fc: tuple[int, ...], dropout: float, classes: int, dropout_first: bool
) -> nn.SequentialCell:
    """The FC head after the adaptive pool: hidden layers with ReLU and dropout (before each, AlexNet; after
    each, VGG), normal(0, 0.01) weights."""
    for units in fc:
        layer = [_dense(features, units, 0.01), nn.ReLU()]
        cells += [nn.Dropout(p=dropout), *layer] if dropout_first else [*layer, nn.Dropout(p=dropout)]
        features = units
    cells.append(_dense(features, classes, 0.01))
    return nn.SequentialCell(cells)


def vgg(arch: VggArch, classes: int) -> nn.SequentialCell:
    """VGG from its layer table (3x3 convs with ReLU, 2x2 max-pools at POOL), adaptive pool, the FC head."""
    if arch.batch_norm:
        raise ValueError("dlbench's MindSpore VGG has no batch-norm variant")
    cells: list[nn.Cell] = []
    cin = 3
    for v in arch.layers:
        if v == POOL:
            cells.append(nn.MaxPool2d(2, 2))
        else:
            cells += [_conv(cin, int(v), 3, 1, 1, bias=True), nn.ReLU()]
            cin = int(v)
    cells += [nn.AdaptiveAvgPool2d(arch.pool), nn.Flatten()]
    return _head(cells, cin * arch.pool**2, arch.fc, arch.dropout, classes, dropout_first=False)


def alexnet(arch: AlexNetArch, classes: int) -> nn.SequentialCell:
    """AlexNet from its convolution table (ReLU after each, 3x3/2 max-pools where marked), adaptive pool,
    the FC head with dropout first (torchvision's layout)."""
    cells: list[nn.Cell] = []
    cin = 3
    for c in arch.convs:
        cells += [_conv(cin, c.out, c.kernel, c.stride, c.padding, bias=True), nn.ReLU()]
        if c.pool_after:
            cells.append(nn.MaxPool2d(3, 2))
        cin = c.out
    cells += [nn.AdaptiveAvgPool2d(arch.pool), nn.Flatten()]
    return _head(cells, cin * arch.pool**2, arch.fc, arch.dropout, classes, dropout_first=True)


# ------------------------------------------------------------------------------------------ Inception v3


class BasicConv(nn.Cell):
    """Bias-free conv, batch norm (eps 1e-3), ReLU."""

    def __init__(
        self, cin: int, cout: int, k: int | tuple[int, int], stride: int = 1, pad: int | tuple[int, int] = 0
    ) -> None:
        super().__init__()
        self.conv, self.bn, self.relu = _conv(cin, cout, k, stride, pad), nn.BatchNorm2d(cout, eps=0.001), nn.ReLU()

    def construct(self, x: Tensor) -> Tensor:
        return self.relu(self.bn(self.conv(x)))


def _seq(*cells: nn.Cell) -> nn.SequentialCell:
    return nn.SequentialCell(list(cells))


def _c7(cin: int, cout: int, horizontal: bool) -> BasicConv:
    """A 1x7 (horizontal) or 7x1 factorised conv with 'same' padding."""
    return BasicConv(cin, cout, (1, 7) if horizontal else (7, 1), pad=(0, 3) if horizontal else (3, 0))


class Branches(nn.Cell):
    """Run parallel branches on one input and concatenate them on the channel axis."""

    def __init__(self, *branches: nn.Cell) -> None:
        super().__init__()
        self.branches = nn.CellList(list(branches))

    def construct(self, x: Tensor) -> Tensor:
        return ops.cat([b(x) for b in self.branches], 1)


def _pool_branch(cin: int, cout: int) -> nn.SequentialCell:
    return _seq(nn.AvgPool2d(3, 1, pad_mode="pad", padding=1), BasicConv(cin, cout, 1))


def _block_a(cin: int, pool: int) -> Branches:
    return Branches(
        BasicConv(cin, 64, 1),
        _seq(BasicConv(cin, 48, 1), BasicConv(48, 64, 5, pad=2)),
        _seq(BasicConv(cin, 64, 1), BasicConv(64, 96, 3, pad=1), BasicConv(96, 96, 3, pad=1)),
        _pool_branch(cin, pool),
    )


def _block_b(cin: int) -> Branches:
    return Branches(
        BasicConv(cin, 384, 3, 2),
        _seq(BasicConv(cin, 64, 1), BasicConv(64, 96, 3, pad=1), BasicConv(96, 96, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def _block_c(cin: int, c7: int) -> Branches:
    return Branches(
        BasicConv(cin, 192, 1),
        _seq(BasicConv(cin, c7, 1), _c7(c7, c7, True), _c7(c7, 192, False)),
        _seq(BasicConv(cin, c7, 1), _c7(c7, c7, False), _c7(c7, c7, True), _c7(c7, c7, False), _c7(c7, 192, True)),
        _pool_branch(cin, 192),
    )


def _block_d(cin: int) -> Branches:
    return Branches(
        _seq(BasicConv(cin, 192, 1), BasicConv(192, 320, 3, 2)),
        _seq(BasicConv(cin, 192, 1), _c7(192, 192, True), _c7(192, 192, False), BasicConv(192, 192, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def _split_13_31(cin: int) -> Branches:
    return Branches(BasicConv(cin, 384, (1, 3), pad=(0, 1)), BasicConv(cin, 384, (3, 1), pad=(1, 0)))


def _block_e(cin: int) -> Branches:
    return Branches(
        BasicConv(cin, 320, 1),
        _seq(BasicConv(cin, 384, 1), _split_13_31(384)),
        _seq(BasicConv(cin, 448, 1), BasicConv(448, 384, 3, pad=1), _split_13_31(384)),
        _pool_branch(cin, 192),
    )


class InceptionV3(nn.Cell):
    """Inception v3 (torchvision layout) with the auxiliary head; construct returns (logits, aux_logits)."""

    def __init__(self, arch: InceptionArch, classes: int, side: int) -> None:
        super().__init__()
        if not arch.aux_logits:
            raise ValueError("dlbench's MindSpore Inception v3 always trains the auxiliary head")
        self.stem = _seq(
            BasicConv(3, 32, 3, 2),
            BasicConv(32, 32, 3),
            BasicConv(32, 64, 3, pad=1),
            nn.MaxPool2d(3, 2),
            BasicConv(64, 80, 1),
            BasicConv(80, 192, 3),
            nn.MaxPool2d(3, 2),
            _block_a(192, 32),
            _block_a(256, 64),
            _block_a(288, 64),
            _block_b(288),
            _block_c(768, 128),
            _block_c(768, 160),
            _block_c(768, 160),
            _block_c(768, 192),
        )
        # torchvision's 5x5/3 pool needs the 17x17 grid of a 299 input; smaller test inputs pool to 5x5.
        self.aux = _seq(
            nn.AvgPool2d(5, 3) if side >= 299 else nn.AdaptiveAvgPool2d(5),
            BasicConv(768, 128, 1),
            BasicConv(128, 768, 5),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            _dense(768, classes),
        )
        self.tail = _seq(
            _block_d(768),
            _block_e(1280),
            _block_e(2048),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(p=arch.dropout),
        )
        self.fc = _dense(2048, classes)

    def construct(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(x)
        return self.fc(self.tail(x)), self.aux(x)


# ------------------------------------------------------------------------------------------------- BERT


class BertLayer(nn.Cell):
    """One post-LayerNorm encoder layer: fused-QKV self-attention, then the GELU feed-forward."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h, std = cfg.hidden_size, cfg.initializer_range
        self.heads, self.head_dim = cfg.num_heads, h // cfg.num_heads
        self.qkv = _dense(h, 3 * h, std)
        self.attn_out = _dense(h, h, std)
        self.attn_norm = nn.LayerNorm((h,), epsilon=cfg.layer_norm_eps)
        self.intermediate = _dense(h, cfg.intermediate_size, std)
        self.output = _dense(cfg.intermediate_size, h, std)
        self.out_norm = nn.LayerNorm((h,), epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(p=cfg.dropout)
        self.attn_dropout = nn.Dropout(p=cfg.dropout)

    def construct(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        b, s, h = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, heads, S, d]
        scores = ops.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(self.head_dim) + mask_bias
        ctx = ops.matmul(self.attn_dropout(ops.softmax(scores, -1)), v).transpose(0, 2, 1, 3).reshape(b, s, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        ff = self.output(ops.gelu(self.intermediate(x), approximate="none"))
        return self.out_norm(x + self.dropout(ff))


class BertForPretraining(nn.Cell):
    """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or BertConfig()
        h, std = cfg.hidden_size, cfg.initializer_range
        self.word_embeddings = nn.Embedding(cfg.vocab_size, h, embedding_table=Normal(std))
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, h, embedding_table=Normal(std))
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, h, embedding_table=Normal(std))
        self.embed_norm = nn.LayerNorm((h,), epsilon=cfg.layer_norm_eps)
        self.embed_dropout = nn.Dropout(p=cfg.dropout)
        self.layers = nn.CellList([BertLayer(cfg) for _ in range(cfg.num_layers)])
        self.pooler = _dense(h, h, std)
        self.mlm_transform = _dense(h, h, std)
        self.mlm_norm = nn.LayerNorm((h,), epsilon=cfg.layer_norm_eps)
        self.mlm_bias = ms.Parameter(ops.zeros(cfg.vocab_size, ms.float32), name="mlm_bias")
        self.nsp = _dense(h, 2, std)

    def construct(
        self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, mlm_positions: Tensor
    ) -> tuple[Tensor, Tensor]:
        """MLM logits [B, P, vocab] at the masked positions [B, P] and NSP logits [B, 2]; attention_mask is
        [B, S], 1 = attend."""
        positions = ops.arange(input_ids.shape[1], dtype=ms.int32)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions).expand_dims(0)
        x = self.embed_dropout(self.embed_norm(x + self.token_type_embeddings(token_type_ids)))
        mask_bias = ((1.0 - attention_mask.astype(ms.float32)) * -1e4).reshape(x.shape[0], 1, 1, -1)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = ops.tanh(self.pooler(x[:, 0]))
        b, p = mlm_positions.shape
        index = ops.broadcast_to(mlm_positions.reshape(b, p, 1), (b, p, x.shape[-1]))
        masked = ops.gather_elements(x, 1, index)  # [B, P, hidden]
        hidden = self.mlm_norm(ops.gelu(self.mlm_transform(masked), approximate="none"))
        table = self.word_embeddings.embedding_table  # tied decoder weight
        mlm_logits = ops.matmul(hidden, table.astype(hidden.dtype).T) + self.mlm_bias.astype(hidden.dtype)
        return mlm_logits, self.nsp(pooled)


# ------------------------------------------------------------------------------------- losses and registry


class TrainLoss(nn.Cell):
    """The case's training loss around its model: cross-entropy (+ aux_weight x the auxiliary head's), or BERT's
    masked-LM (weighted over the gathered predictions, as Google's) + next-sentence loss. Inputs: images and
    labels, or BERT's arrays in BERT_KEYS order."""

    def __init__(self, case: Case, model: nn.Cell) -> None:
        super().__init__()
        self.bert, self.aux_weight, self.model = case.loss.kind == "mlm_nsp", case.loss.aux_weight, model

    def construct(self, *batch: Tensor) -> Tensor:
        if self.bert:
            mlm_logits, nsp_logits = self.model(batch[0], batch[1], batch[2], batch[3])
            vocab = mlm_logits.shape[-1]
            each = ops.cross_entropy(
                mlm_logits.reshape(-1, vocab).astype(ms.float32), batch[4].reshape(-1), reduction="none"
            )
            weights = batch[5].reshape(-1).astype(ms.float32)
            mlm = (each * weights).sum() / (weights.sum() + 1e-5)
            return mlm + ops.cross_entropy(nsp_logits.astype(ms.float32), batch[6])
        out = self.model(batch[0])
        if self.aux_weight:
            return ops.cross_entropy(out[0].astype(ms.float32), batch[1]) + self.aux_weight * ops.cross_entropy(
                out[1].astype(ms.float32), batch[1]
            )
        return ops.cross_entropy(out.astype(ms.float32), batch[1])


def _image(case: Case, side: int | None) -> tuple[int, int]:
    """(classes, the image side the model sees)."""
    assert isinstance(case.input, ImageInput)
    return case.input.classes, side or case.input.size


Builder = Callable[[Case, int | None], nn.Cell]

# The model table: case name -> builder(case, image side) reading the case's architecture. The only place a case
# is named.
MODELS: dict[str, Builder] = {
    "resnet50": lambda c, side: ResNet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "resnet152": lambda c, side: ResNet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "vgg16": lambda c, side: vgg(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "alexnet": lambda c, side: alexnet(c.arch, _image(c, side)[0]),  # type: ignore[arg-type]
    "inception_v3": lambda c, side: InceptionV3(c.arch, *_image(c, side)),  # type: ignore[arg-type]
    "bert_base": lambda c, side: BertForPretraining(c.arch),  # type: ignore[arg-type]
    **dict.fromkeys(LLAMA_MEMBERS, lambda c, side: LlamaModel(llama_arch(c))),  # llama.py (#46)
    **dict.fromkeys(MOE_MEMBERS, lambda c, side: MoeModel(moe_arch(c))),  # moe.py
}


def build_model(case: Case, side: int | None = None) -> nn.Cell:
    """A freshly initialised model for the case; side is the image side it will see (default native)."""
    return MODELS[case.name](case, side)


def loss_cell(case: Case, model: nn.Cell) -> nn.Cell:
    """The model wrapped with the case's training loss (a decoder's: moe.CausalLmLoss)."""
    return CausalLmLoss(model, case.loss.aux_weight) if case.loss.kind == "causal_lm" else TrainLoss(case, model)


def count_trainable(model: nn.Cell) -> int:
    """Trainable parameters; a tied parameter is one Parameter, counted once."""
    return sum(int(p.size) for p in model.trainable_params())


# fmt: off
__all__ = [
    "MODELS", "BertForPretraining", "InceptionV3", "ResNet", "TrainLoss", "alexnet", "build_model",
    "count_trainable", "loss_cell", "vgg"
]
# fmt: on
