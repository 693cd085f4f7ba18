"""Training FLOPs per sample (cases/flops.py) against torch's own counter, and how the input size scales them."""

from __future__ import annotations

import pytest

from dlbench.cases import get_case
from dlbench.cases.flops import forward_flops_per_sample, masked_predictions, train_flops_per_sample
from dlbench.data.synthetic import max_predictions
from dlbench.spec import SpecError

CASES = ["resnet50", "resnet152", "vgg16", "alexnet", "inception_v3", "bert_base"]
SMALL = {"inception_v3": 80, "bert_base": 32}  # the smallest sizes the models take; the others at 64


def _torch_train_flops(name: str, size: int, batch: int = 2) -> float:
    """FLOPs torch's FlopCounterMode counts in one forward + backward of the torch backend's model, per sample."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.backends.torch.models import build_model, train_loss
    from dlbench.data.synthetic import synthetic_bert

    case = get_case(name)
    torch.manual_seed(0)
    model = build_model(case).train()
    if name == "bert_base":
        batch_data = {k: torch.from_numpy(v) for k, v in synthetic_bert(case.input, batch, size, 0).items()}
    else:
        # The convention counts the first layer's input gradient too (backward = 2x forward everywhere); torch
        # skips it for an input that needs no gradient, so the images ask for one here (AlexNet's first
        # convolution is 10% of its forward, which would put torch 3% below the convention otherwise).
        images = torch.randn(batch, 3, size, size, requires_grad=True)
        batch_data = {"images": images, "labels": torch.randint(0, 1000, (batch,))}
    with FlopCounterMode(display=False) as counter:
        train_loss(case, model, batch_data).backward()
    return float(counter.get_total_flops()) / batch


@pytest.mark.parametrize("name", CASES)
def test_train_flops_agree_with_torch_flop_counter(name: str) -> None:
    size = SMALL.get(name, 64)
    ours = train_flops_per_sample(get_case(name), size)
    theirs = _torch_train_flops(name, size)
    # Both count only convolutions and matrix products (attention's two included), 2 per multiply-add, backward
    # 2x forward; neither counts biases (addmm counts the product only), norms, activations, pooling or the loss.
    # They agree exactly here; the 2% is room for a torch whose counter learns a new op.
    assert ours == pytest.approx(theirs, rel=0.02), f"{name}: ours {ours:.4g}, torch {theirs:.4g}"


@pytest.mark.parametrize("name", CASES)
def test_training_is_three_forwards(name: str) -> None:
    case = get_case(name)
    assert train_flops_per_sample(case) == pytest.approx(3 * forward_flops_per_sample(case))


def test_published_forward_figures_at_the_default_input() -> None:
    # Multiply-adds as the papers and torchvision's model cards give them (GMACs): ResNet-50 4.09 (224),
    # VGG-16 15.47, AlexNet 0.71; the counts must land there, not merely agree with a counter.
    gmacs = {n: forward_flops_per_sample(get_case(n)) / 2e9 for n in ("resnet50", "vgg16", "alexnet")}
    assert gmacs["resnet50"] == pytest.approx(4.09, rel=0.01)
    assert gmacs["vgg16"] == pytest.approx(15.47, rel=0.01)
    assert gmacs["alexnet"] == pytest.approx(0.714, rel=0.01)


def test_input_size_scales_the_count() -> None:
    resnet, bert = get_case("resnet50"), get_case("bert_base")
    # Convolutions scale with the area; only the classifier does not.
    assert train_flops_per_sample(resnet, 448) / train_flops_per_sample(resnet, 224) == pytest.approx(4, rel=0.01)
    assert train_flops_per_sample(resnet, None) == train_flops_per_sample(resnet, 224)
    # BERT: the dense layers scale with the sequence, attention with its square, the MLM head with the predictions.
    assert train_flops_per_sample(bert, 256) > 2 * train_flops_per_sample(bert, 128)


@pytest.mark.parametrize("seq", [8, 16, 64, 128, 200, 512])
def test_masked_predictions_follow_the_data(seq: int) -> None:
    text = get_case("bert_base").input
    assert masked_predictions(text, seq) == max_predictions(text, seq)


def test_the_mlm_head_counts_gathered_positions_only() -> None:
    bert = get_case("bert_base")
    cfg = bert.arch
    full = 2 * 128 * cfg.hidden_size * cfg.vocab_size  # the projection over all 128 positions, forward
    gathered = 2 * 20 * cfg.hidden_size * cfg.vocab_size
    assert forward_flops_per_sample(bert) < 0.85 * (forward_flops_per_sample(bert) - gathered + full)


def test_an_input_too_small_for_the_network_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="too small"):
        train_flops_per_sample(get_case("inception_v3"), 32)
    with pytest.raises(SpecError, match="longer"):
        train_flops_per_sample(get_case("bert_base"), 1024)


def test_a_case_reaches_its_count() -> None:
    case = get_case("resnet50")
    assert case.train_flops_per_sample(112) == train_flops_per_sample(case, 112)


def test_a_case_module_can_register_its_own_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from dlbench.cases import flops

    @dataclasses.dataclass(frozen=True)
    class TinyArch:
        width: int = 4

    monkeypatch.setattr(flops, "FORWARD_COUNTERS", {})
    case = dataclasses.replace(get_case("resnet50"), name="tiny", arch=TinyArch())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no FLOP count"):
        dataclasses.replace(case, input=get_case("bert_base").input).train_flops_per_sample()
    flops.register_forward_flops(TinyArch, lambda c, size: 2.0 * c.arch.width * (size or 8))  # type: ignore[attr-defined]
    assert train_flops_per_sample(case, 10) == 3 * 2.0 * 4 * 10


def test_taps_on_the_padding_can_be_left_out_as_xla_counts() -> None:
    from dlbench.cases.flops import _valid_taps, forward_macs

    assert _valid_taps(1, 3, 1, 1, 1) == 1  # a 3x3 'same' conv on a 1x1 map: one tap of three per axis
    assert _valid_taps(4, 3, 1, 1, 4) == 2 + 3 + 3 + 2
    assert _valid_taps(7, 7, 2, 3, 4) == 4 + 6 + 6 + 4  # a 7x7/2 conv, pad 3, on a 7-wide map
    resnet, bert = get_case("resnet50"), get_case("bert_base")
    assert forward_macs(resnet, 64, padded_taps=False) < forward_macs(resnet, 64)
    assert forward_macs(bert, 32, padded_taps=False) == forward_macs(bert, 32)  # no convolution
