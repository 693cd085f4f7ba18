"""Training FLOPs per sample of each case, from its own architecture table. Framework-free.

The "model FLOPs" convention (Kaplan et al. 2020; Chowdhery et al. 2022, PaLM's MFU): 2 FLOPs per
multiply-add of every convolution and matrix product (linear layers, attention scores and the attention-weighted
values), backward = 2x forward (the gradient of the input and of the weight, each as costly as the forward
product, the first layer's input gradient included), no recomputation. Element-wise work (activations, batch
and layer norm, pooling, softmax, biases, the optimizer) and embedding look-ups are not counted: they are a few
per cent of the total and what counters such as torch's ``FlopCounterMode`` also leave out.

BERT's masked-LM head counts only the gathered masked positions (``masked_predictions``), as the case trains.
An architecture this module does not know is counted by the formula its case module registers
(``register_forward_flops``), under the same convention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlbench.cases import Case, ImageInput, TextInput
from dlbench.cases.arch import POOL, AlexNetArch, BertConfig, InceptionArch, ResNetArch, VggArch
from dlbench.spec import SpecError

BACKWARD_FACTOR = 2.0  # backward = 2x forward
TRAIN_FACTOR = 1.0 + BACKWARD_FACTOR


def _valid_taps(size: int, k: int, stride: int, pad: int, out: int) -> int:
    """Kernel taps along one axis that land inside the input, summed over the outputs (padding excluded)."""
    return sum(min(size, i * stride - pad + k) - max(0, i * stride - pad) for i in range(out))


@dataclass
class _Count:
    """Multiply-adds accumulated while walking a network's shapes; with `padded` False, a convolution's taps
    that fall on its zero padding are left out (XLA's cost analysis counts that way). `outputs` sums the elements
    every convolution and dense layer produces: what a training step keeps for the backward pass scales with it
    (analysis/memory.py)."""

    padded: bool = True
    macs: int = 0
    outputs: int = 0

    def conv(
        self, cin: int, cout: int, side: int, k: int | tuple[int, int], stride: int = 1, pad: int | tuple[int, int] = 0
    ) -> int:
        """Add one square-input convolution (kernel k or (kh, kw), padding p or (ph, pw)); its output side."""
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = (side + 2 * ph - kh) // stride + 1, (side + 2 * pw - kw) // stride + 1
        if oh < 1 or ow < 1:
            raise SpecError(f"input too small: a {kh}x{kw} convolution would see a {side}x{side} map")
        self.outputs += cout * oh * ow
        if self.padded:
            self.macs += cin * cout * kh * kw * oh * ow
        else:
            self.macs += cin * cout * _valid_taps(side, kh, stride, ph, oh) * _valid_taps(side, kw, stride, pw, ow)
        return oh

    def linear(self, fan_in: int, fan_out: int, rows: int = 1) -> None:
        """Add a dense layer applied to `rows` vectors."""
        self.macs += rows * fan_in * fan_out
        self.outputs += rows * fan_out


def _pool(side: int, k: int, stride: int, pad: int = 0) -> int:
    """Output side of a max/average pool (no FLOPs counted)."""
    out = (side + 2 * pad - k) // stride + 1
    if out < 1:
        raise SpecError(f"input too small: a {k}x{k} pool would see a {side}x{side} map")
    return out


def resnet_macs(a: ResNetArch, side: int, classes: int, padded: bool = True) -> int:
    """Multiply-adds of one ResNet forward at a side x side input, its head `classes` wide (a case built on a
    ResNet backbone, such as face's 512-d embedding, counts its trunk with this)."""
    return _resnet(a, side, classes, padded).macs


def _resnet(a: ResNetArch, side: int, classes: int, padded: bool) -> _Count:
    c = _Count(padded)
    side = _pool(c.conv(3, a.width, side, 7, 2, 3), 3, 2, 1)
    cin = a.width
    for i, blocks in enumerate(a.stages):
        width = a.width * 2**i
        for j in range(blocks):
            stride, cout = (2 if i > 0 and j == 0 else 1), width * a.expansion
            if a.stride_on_3x3:  # v1.5
                out = c.conv(width, width, c.conv(cin, width, side, 1), 3, stride, 1)
            else:  # v1: the stride sits on the first 1x1
                out = c.conv(width, width, c.conv(cin, width, side, 1, stride), 3, 1, 1)
            c.conv(width, cout, out, 1)
            if stride != 1 or cin != cout:
                c.conv(cin, cout, side, 1, stride)
            cin, side = cout, out
    c.linear(cin, classes)
    return c


def _vgg(a: VggArch, side: int, classes: int, padded: bool) -> _Count:
    c, cin = _Count(padded), 3
    for v in a.layers:
        if v == POOL:
            side = _pool(side, 2, 2)
        else:
            assert isinstance(v, int)
            side, cin = c.conv(cin, v, side, 3, 1, 1), v
    fan_in = cin * a.pool**2  # the adaptive average pool to pool x pool
    for width in (*a.fc, classes):
        c.linear(fan_in, width)
        fan_in = width
    return c


def _alexnet(a: AlexNetArch, side: int, classes: int, padded: bool) -> _Count:
    c, cin = _Count(padded), 3
    for layer in a.convs:
        side, cin = c.conv(cin, layer.out, side, layer.kernel, layer.stride, layer.padding), layer.out
        if layer.pool_after:
            side = _pool(side, 3, 2)
    fan_in = cin * a.pool**2
    for width in (*a.fc, classes):
        c.linear(fan_in, width)
        fan_in = width
    return c


def _inception(a: InceptionArch, side: int, classes: int, padded: bool) -> _Count:
    """torchvision's Inception3 layout, block by block (the same table as every backend's model)."""
    c = _Count(padded)
    s = c.conv(3, 32, side, 3, 2)
    s = c.conv(32, 64, c.conv(32, 32, s, 3), 3, 1, 1)
    s = _pool(s, 3, 2)
    s = _pool(c.conv(80, 192, c.conv(64, 80, s, 1), 3), 3, 2)
    for cin, pool_features in ((192, 32), (256, 64), (288, 64)):  # InceptionA
        c.conv(cin, 64, s, 1)
        c.conv(48, 64, c.conv(cin, 48, s, 1), 5, 1, 2)
        c.conv(96, 96, c.conv(64, 96, c.conv(cin, 64, s, 1), 3, 1, 1), 3, 1, 1)
        c.conv(cin, pool_features, s, 1)
    out = c.conv(288, 384, s, 3, 2)  # InceptionB
    c.conv(96, 96, c.conv(64, 96, c.conv(288, 64, s, 1), 3, 1, 1), 3, 2)
    s = out
    for c7 in (128, 160, 160, 192):  # InceptionC
        c.conv(768, 192, s, 1)
        c.conv(c7, 192, c.conv(c7, c7, c.conv(768, c7, s, 1), (1, 7), 1, (0, 3)), (7, 1), 1, (3, 0))
        t = c.conv(768, c7, s, 1)
        for k, last in (((7, 1), c7), ((1, 7), c7), ((7, 1), c7), ((1, 7), 192)):
            t = c.conv(c7, last, t, k, 1, (k[0] // 2, k[1] // 2))
        c.conv(768, 192, s, 1)
    if a.aux_logits:  # trains too: 5x5/3 average pool (adaptive to 5x5 on a small grid), 1x1, 5x5, fc
        p = _pool(s, 5, 3) if s >= 17 else 5
        c.conv(128, 768, c.conv(768, 128, p, 1), 5)
        c.linear(768, classes)
    out = c.conv(192, 320, c.conv(768, 192, s, 1), 3, 2)  # InceptionD
    t = c.conv(192, 192, c.conv(192, 192, c.conv(768, 192, s, 1), (1, 7), 1, (0, 3)), (7, 1), 1, (3, 0))
    c.conv(192, 192, t, 3, 2)
    s = out
    for cin in (1280, 2048):  # InceptionE
        c.conv(cin, 320, s, 1)
        for branch in (c.conv(cin, 384, s, 1), c.conv(448, 384, c.conv(cin, 448, s, 1), 3, 1, 1)):
            c.conv(384, 384, branch, (1, 3), 1, (0, 1))
            c.conv(384, 384, branch, (3, 1), 1, (1, 0))
        c.conv(cin, 192, s, 1)
    c.linear(2048, classes)
    return c


def masked_predictions(text: TextInput, seq_len: int) -> int:
    """Masked-LM predictions per sequence at this length (the rule of dlbench.data.synthetic.max_predictions)."""
    return max(1, round(text.max_predictions * seq_len / text.seq_len))


def _bert(a: BertConfig, seq: int, predictions: int) -> int:
    if seq > a.max_position_embeddings:
        raise SpecError(f"sequence {seq} is longer than BERT's {a.max_position_embeddings} positions")
    c, h = _Count(), a.hidden_size
    per_layer = (
        seq * h * 3 * h  # fused query, key, value
        + 2 * seq * seq * h  # scores Q K^T and the weighted values, over all heads
        + seq * h * h  # attention output
        + 2 * seq * h * a.intermediate_size
    )  # the feed-forward's two layers
    c.macs += a.num_layers * per_layer
    c.linear(h, h)  # pooler, on [CLS]
    c.linear(h, 2)  # next-sentence head
    c.linear(h, h, predictions)  # masked-LM transform, gathered positions only
    c.linear(h, a.vocab_size, predictions)  # tied vocabulary projection, gathered positions only
    return c.macs


# Architectures counted outside this module: arch type -> forward FLOPs of one sample (case, input size).
FORWARD_COUNTERS: dict[type, Callable[[Case, int | None], float]] = {}


def register_forward_flops(arch: type, counter: Callable[[Case, int | None], float]) -> None:
    """Count an architecture this module does not know (a case module registers its own formula)."""
    FORWARD_COUNTERS[arch] = counter


def forward_macs(case: Case, input_size: int | None = None, padded_taps: bool = True) -> int:
    """Multiply-adds of one sample's forward pass at the case's input (or `input_size`: side or sequence);
    `padded_taps=False` leaves out the convolution taps that fall on zero padding (for XLA's count)."""
    arch, inp = case.arch, case.input
    if type(arch) in FORWARD_COUNTERS:
        return round(FORWARD_COUNTERS[type(arch)](case, input_size) / 2)
    if isinstance(inp, TextInput) and isinstance(arch, BertConfig):
        seq = input_size or inp.seq_len
        return _bert(arch, seq, masked_predictions(inp, seq))
    return _image_walk(case, input_size, padded_taps).macs


def _image_walk(case: Case, input_size: int | None, padded_taps: bool = True) -> _Count:
    """One walk of an image classifier's shapes at its input (or `input_size`)."""
    arch, inp = case.arch, case.input
    if not isinstance(inp, ImageInput):
        raise TypeError(f"case {case.name}: no FLOP count for {type(arch).__name__} on {type(inp).__name__}")
    side, classes = input_size or inp.size, inp.classes
    if isinstance(arch, ResNetArch):
        return _resnet(arch, side, classes, padded_taps)
    if isinstance(arch, VggArch):
        return _vgg(arch, side, classes, padded_taps)
    if isinstance(arch, AlexNetArch):
        return _alexnet(arch, side, classes, padded_taps)
    if isinstance(arch, InceptionArch):
        return _inception(arch, side, classes, padded_taps)
    raise TypeError(f"case {case.name}: no FLOP count for {type(arch).__name__}")


def layer_outputs(case: Case, input_size: int | None = None) -> int:
    """Elements every convolution and dense layer of one sample's forward pass produces, at the case's input (or
    `input_size`), for the CNN image classifiers (a TypeError for other architectures)."""
    return _image_walk(case, input_size).outputs


def resnet_outputs(a: ResNetArch, side: int, classes: int) -> int:
    """Elements every layer of one ResNet forward produces at a side x side input (a case on a ResNet trunk)."""
    return _resnet(a, side, classes, True).outputs


def forward_flops_per_sample(case: Case, input_size: int | None = None) -> float:
    """Forward FLOPs of one sample: 2 per multiply-add."""
    counter = FORWARD_COUNTERS.get(type(case.arch))
    return counter(case, input_size) if counter is not None else 2.0 * forward_macs(case, input_size)


def train_flops_per_sample(case: Case, input_size: int | None = None) -> float:
    """Training FLOPs of one sample (forward + backward = 3x forward), model-FLOPs convention."""
    return TRAIN_FACTOR * forward_flops_per_sample(case, input_size)


__all__ = [
    "BACKWARD_FACTOR",
    "FORWARD_COUNTERS",
    "TRAIN_FACTOR",
    "forward_flops_per_sample",
    "forward_macs",
    "layer_outputs",
    "masked_predictions",
    "register_forward_flops",
    "resnet_macs",
    "resnet_outputs",
    "train_flops_per_sample",
]
