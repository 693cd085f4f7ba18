"""The canonical tensors of a case: one name, shape and role per tensor, from the case's architecture table alone.

Names and layouts are torchvision's and Hugging Face's (the torch backend's `state_dict` names, which a test checks
against these): convolutions OIHW, dense weights [out, in], BatchNorm as weight/bias/running_mean/running_var, a
fused query-key-value projection [3H, H] in (q, k, v) x heads order, and a tied weight listed once. Each backend's
`same_model.py` maps its own names and layouts to these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import (
    POOL,
    AlexNetArch,
    BertConfig,
    FaceArch,
    GptConfig,
    InceptionArch,
    LlamaConfig,
    MoeConfig,
    ResNetArch,
    VggArch,
    WideDeepArch,
)
from dlbench.cases.face import face_arch
from dlbench.cases.gpt import gpt_arch
from dlbench.cases.llama import llama_arch
from dlbench.cases.moe import moe_arch
from dlbench.cases.wide_deep import ctr_input, deep_input_width, wide_deep_arch

Role = Literal[
    "conv",
    "linear",
    "bias",
    "norm_weight",
    "residual_norm_weight",  # the last norm of a residual branch (ResNet's bn3): drawn small, see values.py
    "norm_bias",
    "running_mean",
    "running_var",
    "routing_bias",  # a MoE layer's routing bias (DeepSeek-V3's), moved by the bias balance, not by a gradient
    "embedding",
]
# state a step updates without a gradient
BUFFERS: frozenset[Role] = frozenset({"running_mean", "running_var", "routing_bias"})


@dataclass(frozen=True)
class Tensor:
    """One canonical tensor: its name, shape (canonical layout) and role (what its values look like)."""

    name: str
    shape: tuple[int, ...]
    role: Role

    @property
    def trainable(self) -> bool:
        """Whether an optimizer updates it (BatchNorm's running statistics are buffers)."""
        return self.role not in BUFFERS


class Unsupported(Exception):
    """The case has no canonical tensor list yet (its architecture is not described here)."""


def _conv(name: str, out: int, inp: int, kh: int, kw: int | None = None, bias: bool = False) -> Iterator[Tensor]:
    yield Tensor(f"{name}.weight", (out, inp, kh, kh if kw is None else kw), "conv")
    if bias:
        yield Tensor(f"{name}.bias", (out,), "bias")


def _bn(name: str, ch: int, residual: bool = False) -> Iterator[Tensor]:
    yield Tensor(f"{name}.weight", (ch,), "residual_norm_weight" if residual else "norm_weight")
    yield Tensor(f"{name}.bias", (ch,), "norm_bias")
    yield Tensor(f"{name}.running_mean", (ch,), "running_mean")
    yield Tensor(f"{name}.running_var", (ch,), "running_var")


def _linear(name: str, out: int, inp: int, bias: bool = True) -> Iterator[Tensor]:
    yield Tensor(f"{name}.weight", (out, inp), "linear")
    if bias:
        yield Tensor(f"{name}.bias", (out,), "bias")


def _ln(name: str, width: int, bias: bool = True) -> Iterator[Tensor]:
    yield Tensor(f"{name}.weight", (width,), "norm_weight")
    if bias:
        yield Tensor(f"{name}.bias", (width,), "norm_bias")


def _classes(case: Case) -> int:
    return case.input.classes if isinstance(case.input, ImageInput) else 1000


# ---------------------------------------------------------------------------------------------------- CNNs


def resnet(a: ResNetArch, classes: int) -> Iterator[Tensor]:
    """Bottleneck ResNet: stem (conv, BN), stages.i.j.{conv,bn}{1,2,3} and downsample.{0,1}, fc."""
    yield from _conv("stem.0", a.width, 3, 7)
    yield from _bn("stem.1", a.width)
    in_ch = a.width
    for i, blocks in enumerate(a.stages):
        width = a.width * 2**i
        out = width * a.expansion
        for j in range(blocks):
            p = f"stages.{i}.{j}"
            stride = 2 if (i > 0 and j == 0) else 1
            yield from _conv(f"{p}.conv1", width, in_ch, 1)
            yield from _bn(f"{p}.bn1", width)
            yield from _conv(f"{p}.conv2", width, width, 3)
            yield from _bn(f"{p}.bn2", width)
            yield from _conv(f"{p}.conv3", out, width, 1)
            yield from _bn(f"{p}.bn3", out, residual=True)
            if stride != 1 or in_ch != out:
                yield from _conv(f"{p}.downsample.0", out, in_ch, 1)
                yield from _bn(f"{p}.downsample.1", out)
            in_ch = out
    yield from _linear("fc", classes, in_ch)


def _head(fc: tuple[int, ...], width: int, classes: int, dropout_last: bool) -> Iterator[Tensor]:
    """The FC head of VGG ([Linear, ReLU, Dropout] x n, Linear) and AlexNet ([Dropout, Linear, ReLU] x n, Linear)."""
    index = 0
    for hidden in fc:
        at = index if dropout_last else index + 1
        yield from _linear(f"classifier.{at}", hidden, width)
        index += 3
        width = hidden
    yield from _linear(f"classifier.{index}", classes, width)


def vgg(a: VggArch, classes: int) -> Iterator[Tensor]:
    """VGG: features.K (K the conv's index in the conv/ReLU/pool sequence), classifier.K."""
    index, in_ch = 0, 3
    for v in a.layers:
        if v == POOL:
            index += 1
            continue
        assert isinstance(v, int)
        yield from _conv(f"features.{index}", v, in_ch, 3, bias=True)
        index, in_ch = index + 2, v
    yield from _head(a.fc, in_ch * a.pool**2, classes, dropout_last=True)


def alexnet(a: AlexNetArch, classes: int) -> Iterator[Tensor]:
    """AlexNet: features.K for its convolutions, classifier.K."""
    index, in_ch = 0, 3
    for c in a.convs:
        yield from _conv(f"features.{index}", c.out, in_ch, c.kernel, bias=True)
        index, in_ch = index + (3 if c.pool_after else 2), c.out
    yield from _head(a.fc, in_ch * a.pool**2, classes, dropout_last=False)


def _basic(name: str, out: int, inp: int, kh: int, kw: int | None = None) -> Iterator[Tensor]:
    """BasicConv2d: bias-free conv and BN."""
    yield from _conv(f"{name}.conv", out, inp, kh, kw)
    yield from _bn(f"{name}.bn", out)


def _chain(name: str, inp: int, convs: list[tuple[int, int, int]]) -> Iterator[Tensor]:
    """BasicConv2ds in an nn.Sequential: name.0, name.1 ... each (out, kh, kw)."""
    for k, (out, kh, kw) in enumerate(convs):
        yield from _basic(f"{name}.{k}", out, inp, kh, kw)
        inp = out


def _inception_block(name: str, kind: str, inp: int, arg: int) -> Iterator[Tensor]:
    if kind == "A":
        yield from _basic(f"{name}.b1x1", 64, inp, 1)
        yield from _chain(f"{name}.b5x5", inp, [(48, 1, 1), (64, 5, 5)])
        yield from _chain(f"{name}.b3x3dbl", inp, [(64, 1, 1), (96, 3, 3), (96, 3, 3)])
        yield from _basic(f"{name}.bpool", arg, inp, 1)
    elif kind == "B":
        yield from _basic(f"{name}.b3x3", 384, inp, 3)
        yield from _chain(f"{name}.b3x3dbl", inp, [(64, 1, 1), (96, 3, 3), (96, 3, 3)])
    elif kind == "C":
        yield from _basic(f"{name}.b1x1", 192, inp, 1)
        yield from _chain(f"{name}.b7x7", inp, [(arg, 1, 1), (arg, 1, 7), (192, 7, 1)])
        yield from _chain(f"{name}.b7x7dbl", inp, [(arg, 1, 1), (arg, 7, 1), (arg, 1, 7), (arg, 7, 1), (192, 1, 7)])
        yield from _basic(f"{name}.bpool", 192, inp, 1)
    elif kind == "D":
        yield from _chain(f"{name}.b3x3", inp, [(192, 1, 1), (320, 3, 3)])
        yield from _chain(f"{name}.b7x7x3", inp, [(192, 1, 1), (192, 1, 7), (192, 7, 1), (192, 3, 3)])
    else:  # E
        yield from _basic(f"{name}.b1x1", 320, inp, 1)
        yield from _basic(f"{name}.b3x3_1", 384, inp, 1)
        yield from _basic(f"{name}.b3x3_2a", 384, 384, 1, 3)
        yield from _basic(f"{name}.b3x3_2b", 384, 384, 3, 1)
        yield from _chain(f"{name}.b3x3dbl_1", inp, [(448, 1, 1), (384, 3, 3)])
        yield from _basic(f"{name}.b3x3dbl_3a", 384, 384, 1, 3)
        yield from _basic(f"{name}.b3x3dbl_3b", 384, 384, 3, 1)
        yield from _basic(f"{name}.bpool", 192, inp, 1)


# Inception v3's stem sequence after the three stem convs: (kind, pool features or c7 channels, input channels).
_INCEPTION_STEM = (
    ("A", 32, 192),
    ("A", 64, 256),
    ("A", 64, 288),
    ("B", 0, 288),
    ("C", 128, 768),
    ("C", 160, 768),
    ("C", 160, 768),
    ("C", 192, 768),
)


def inception_v3(a: InceptionArch, classes: int) -> Iterator[Tensor]:
    """Inception v3 (torchvision's Inception3 with the auxiliary head): stem.K, aux, tail.K, fc."""
    yield from _basic("stem.0", 32, 3, 3)
    yield from _basic("stem.1", 32, 32, 3)
    yield from _basic("stem.2", 64, 32, 3)
    yield from _basic("stem.4", 80, 64, 1)
    yield from _basic("stem.5", 192, 80, 3)
    for k, (kind, arg, inp) in enumerate(_INCEPTION_STEM):
        yield from _inception_block(f"stem.{7 + k}", kind, inp, arg)
    if a.aux_logits:
        yield from _basic("aux.conv0", 128, 768, 1)
        yield from _basic("aux.conv1", 768, 128, 5)
        yield from _linear("aux.fc", classes, 768)
    for k, (kind, inp) in enumerate((("D", 768), ("E", 1280), ("E", 2048))):
        yield from _inception_block(f"tail.{k}", kind, inp, 0)
    yield from _linear("fc", classes, 2048)


# ------------------------------------------------------------------------------------------- transformers


def bert(c: BertConfig) -> Iterator[Tensor]:
    """BERT for pre-training, HF's layout with a fused QKV; the MLM decoder is the word embedding (listed once)."""
    h = c.hidden_size
    yield Tensor("mlm_bias", (c.vocab_size,), "bias")
    yield Tensor("embeddings.word_embeddings.weight", (c.vocab_size, h), "embedding")
    yield Tensor("embeddings.position_embeddings.weight", (c.max_position_embeddings, h), "embedding")
    yield Tensor("embeddings.token_type_embeddings.weight", (c.type_vocab_size, h), "embedding")
    yield from _ln("embeddings.layer_norm", h)
    for i in range(c.num_layers):
        p = f"layers.{i}"
        yield from _linear(f"{p}.qkv", 3 * h, h)
        yield from _linear(f"{p}.attn_out", h, h)
        yield from _ln(f"{p}.attn_norm", h)
        yield from _linear(f"{p}.intermediate", c.intermediate_size, h)
        yield from _linear(f"{p}.output", h, c.intermediate_size)
        yield from _ln(f"{p}.out_norm", h)
    yield from _linear("pooler", h, h)
    yield from _linear("nsp", 2, h)
    yield from _linear("mlm_transform", h, h)
    yield from _ln("mlm_norm", h)


def gpt(c: GptConfig) -> Iterator[Tensor]:
    """GPT-2: token and position embeddings, pre-LN blocks with a fused QKV, the final norm; the LM head is the
    token embedding where tied."""
    h, ffn = c.hidden_size, c.mlp_ratio * c.hidden_size
    yield Tensor("wte.weight", (c.vocab_size, h), "embedding")
    yield Tensor("wpe.weight", (c.max_positions, h), "embedding")
    for i in range(c.num_layers):
        p = f"blocks.{i}"
        yield from _ln(f"{p}.ln_1", h)
        yield from _linear(f"{p}.attn.qkv", 3 * h, h)
        yield from _linear(f"{p}.attn.proj", h, h)
        yield from _ln(f"{p}.ln_2", h)
        yield from _linear(f"{p}.fc", ffn, h)
        yield from _linear(f"{p}.proj", h, ffn)
    yield from _ln("ln_f", h)
    if not c.tied_embeddings:
        yield from _linear("lm_head", c.vocab_size, h, bias=False)


def _swiglu(name: str, h: int, ffn: int) -> Iterator[Tensor]:
    yield from _linear(f"{name}.w1", ffn, h, bias=False)
    yield from _linear(f"{name}.w2", h, ffn, bias=False)
    yield from _linear(f"{name}.w3", ffn, h, bias=False)


def llama(c: LlamaConfig, moe: MoeConfig | None = None) -> Iterator[Tensor]:
    """A Llama decoder (RMSNorm, GQA, SwiGLU, no biases); with `moe`, each MLP is the router and its experts."""
    h, kv = c.hidden_size, c.num_kv_heads * c.head_dim
    yield Tensor("wte.weight", (c.vocab_size, h), "embedding")
    for i in range(c.num_layers):
        p = f"blocks.{i}"
        yield from _ln(f"{p}.attention_norm", h, bias=False)
        yield from _linear(f"{p}.attention.wq", h, h, bias=False)
        yield from _linear(f"{p}.attention.wk", kv, h, bias=False)
        yield from _linear(f"{p}.attention.wv", kv, h, bias=False)
        yield from _linear(f"{p}.attention.wo", h, h, bias=False)
        yield from _ln(f"{p}.ffn_norm", h, bias=False)
        if moe is None:
            yield from _swiglu(f"{p}.feed_forward", h, c.ffn_size)
            continue
        yield from _linear(f"{p}.feed_forward.router", moe.num_experts, h, bias=False)
        yield Tensor(f"{p}.feed_forward.score_bias", (moe.num_experts,), "routing_bias")
        for e in range(moe.num_experts):
            yield from _swiglu(f"{p}.feed_forward.experts.{e}", h, moe.expert_ffn)
        for e in range(moe.shared_experts):
            yield from _swiglu(f"{p}.feed_forward.shared.{e}", h, moe.expert_ffn)
    yield from _ln("norm", h, bias=False)
    if not c.tied_embeddings:
        yield from _linear("lm_head", c.vocab_size, h, bias=False)


def wide_deep(a: WideDeepArch, deep_in: int) -> Iterator[Tensor]:
    """Wide & Deep: the wide table [vocab, 1], the deep table [vocab, e], the MLP as mlp.K (Linear, ReLU, Dropout)."""
    yield Tensor("wide.weight", (a.vocab, 1), "embedding")
    yield Tensor("deep.weight", (a.vocab, a.embedding), "embedding")
    width = deep_in
    for k, hidden in enumerate(a.hidden):
        yield from _linear(f"mlp.{3 * k}", hidden, width)
        width = hidden
    yield from _linear(f"mlp.{3 * len(a.hidden)}", 1, width)


def face(case: Case) -> Iterator[Tensor]:
    """The face model: the ResNet backbone with the embedding as its fc (replicated.0), BatchNorm1d (replicated.1)
    and the ArcFace classifier `weight` [classes, embedding]."""
    a = face_arch(case)
    yield Tensor("weight", (a.classes, a.embedding), "linear")
    for t in resnet(a.backbone, a.embedding):
        yield Tensor(f"replicated.0.{t.name}", t.shape, t.role)
    yield from _bn("replicated.1", a.embedding)


def tensors(case: Case) -> list[Tensor]:
    """The case's canonical tensors, in a fixed order; Unsupported for an architecture not described here."""
    a = case.arch
    if isinstance(a, ResNetArch):
        return list(resnet(a, _classes(case)))
    if isinstance(a, VggArch) and not a.batch_norm:
        return list(vgg(a, _classes(case)))
    if isinstance(a, AlexNetArch):
        return list(alexnet(a, _classes(case)))
    if isinstance(a, InceptionArch):
        return list(inception_v3(a, _classes(case)))
    if isinstance(a, BertConfig):
        return list(bert(a))
    if isinstance(a, GptConfig):
        return list(gpt(gpt_arch(case)))
    if isinstance(a, MoeConfig):
        m = moe_arch(case)
        if m.mla or m.head_dim or m.attention_bias or m.sinks or m.router_bias or m.expert_bias:
            raise Unsupported(
                f"{case.name}: no canonical tensor list for DeepSeek's latent attention or GPT-OSS's biases and "
                "sinks yet"
            )
        return list(llama(m.base, m))
    if isinstance(a, LlamaConfig):
        return list(llama(llama_arch(case)))
    if isinstance(a, WideDeepArch):
        return list(wide_deep(wide_deep_arch(case), deep_input_width(wide_deep_arch(case), ctr_input(case))))
    if isinstance(a, FaceArch):
        return list(face(case))
    raise Unsupported(f"{case.name}: no canonical tensor list for its architecture ({type(a).__name__}) yet")


def parameter_count(case: Case) -> int:
    """Trainable elements over the canonical tensors (a test compares it with the case's reference count)."""
    total = 0
    for t in tensors(case):
        if t.trainable:
            n = 1
            for d in t.shape:
                n *= d
            total += n
    return total


__all__ = ["BUFFERS", "Role", "Tensor", "Unsupported", "parameter_count", "tensors"]
