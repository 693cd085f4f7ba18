"""The GPT case: parameter counts from the formula for every size, the torch model's exact count, causal masking,
the Megatron-LM FLOPs formula on values worked by hand, the synthetic next-token batch, and tokens/s in the table."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from rich.console import Console

from dlbench.cases import get_case
from dlbench.cases.arch import GptConfig
from dlbench.cases.gpt import (
    SIZES,
    lm_rates,
    megatron_flops_per_sample,
    param_count,
    sequence_length,
    tokens_per_sample,
)
from dlbench.data.synthetic import synthetic_gpt
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.report.table import fmt_lm_rates, points_table
from dlbench.spec import PointSpec, Protocol, SpecError

# Published counts of the GPT-2 family with tied embeddings (HF gpt2, gpt2-medium, gpt2-large, gpt2-xl).
PUBLISHED = {124: 124_439_808, 350: 354_823_168, 774: 774_030_080, 1558: 1_557_611_200}
TINY = GptConfig(vocab_size=12, hidden_size=6, num_layers=1, num_heads=2, max_positions=8)


def test_case_is_gpt2_small_with_its_exact_count() -> None:
    case = get_case("gpt2_small")
    assert case.param_count == param_count(case.arch) == 124_439_808  # type: ignore[arg-type]
    assert (case.loss.kind, case.optimizer.name, case.task) == ("causal_lm", "adamw", "causal_lm")
    assert case.input.seq_len == 1024 and case.input.vocab == case.arch.vocab_size  # type: ignore[union-attr]


@pytest.mark.parametrize("size", sorted(PUBLISHED))
def test_formula_gives_the_published_counts(size: int) -> None:
    assert param_count(SIZES[size]) == PUBLISHED[size]


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_size_is_near_its_name_and_configures_the_case(size: int) -> None:
    case = get_case("gpt2_small").configured({"size": size})
    assert case.arch == SIZES[size] and case.param_count == param_count(SIZES[size])
    assert abs(case.param_count / (size * 1e6) - 1) < 0.03
    assert case.arch.hidden_size % case.arch.num_heads == 0  # type: ignore[union-attr]


def test_a_size_outside_the_family_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="size must be one of 124, 350, 760"):
        get_case("gpt2_small").configured({"size": 500})


def test_untied_head_adds_the_vocabulary_projection() -> None:
    untied = dataclasses.replace(TINY, tied_embeddings=False)
    assert param_count(untied) - param_count(TINY) == 12 * 6


def test_megatron_formula_on_values_worked_by_hand() -> None:
    case = dataclasses.replace(get_case("gpt2_small"), arch=TINY)
    # s = 6, l = 1, h = 6, V = 12. Forward: 24 s h^2 + 4 s^2 h = 6048 per layer, logits 2 s h V = 864.
    assert megatron_flops_per_sample(case, 6) == pytest.approx(3 * (6048 + 864))  # 72 s l h^2 (1 + 1/6 + 1/6)
    assert megatron_flops_per_sample(case, 6, recompute=True) == pytest.approx(4 * 6048 + 3 * 864)
    small = get_case("gpt2_small")
    s, n, h, v = 1024, 12, 768, 50257
    assert megatron_flops_per_sample(small) == pytest.approx(72 * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h)))
    assert megatron_flops_per_sample(small) == pytest.approx(874_944_921_600)


def test_sequence_longer_than_the_positions_is_refused() -> None:
    case = get_case("gpt2_small")
    assert sequence_length(case) == 1024 and sequence_length(case, 32) == 32
    with pytest.raises(SpecError, match="1 to 1024"):
        sequence_length(case, 2048)


def test_tokens_per_sample_only_for_a_causal_lm() -> None:
    assert tokens_per_sample("gpt2_small") == 1024
    assert tokens_per_sample("gpt2", 32) == 32
    assert tokens_per_sample("bert_base") is None and tokens_per_sample("resnet50") is None
    assert tokens_per_sample("no_such_model") is None


def test_synthetic_labels_are_the_next_tokens() -> None:
    arrays = synthetic_gpt(get_case("gpt2_small").input, 3, 16, seed=1)  # type: ignore[arg-type]
    ids, labels = arrays["input_ids"], arrays["labels"]
    assert ids.shape == labels.shape == (3, 16) and ids.dtype == labels.dtype == np.int64
    assert (ids[:, 1:] == labels[:, :-1]).all()
    assert 0 <= ids.min() and max(ids.max(), labels.max()) < 50257
    assert (synthetic_gpt(get_case("gpt2_small").input, 3, 16, seed=1)["labels"] == labels).all()  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- torch model


@pytest.mark.parametrize("size", sorted(SIZES))
def test_torch_model_has_the_formula_s_count(size: int) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.torch.models import build_model, count_trainable

    case = get_case("gpt2_small").configured({"size": size})
    with torch.device("meta"):  # shapes only: no memory for the large members
        model = build_model(case)
    assert count_trainable(model) == case.param_count


def test_torch_model_of_gpt2_small_is_exact_and_tied() -> None:
    pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.torch.models import build_model, count_trainable

    model = build_model(get_case("gpt2_small"))
    assert count_trainable(model) == 124_439_808
    assert model.lm_head.weight is model.wte.weight  # type: ignore[union-attr]


def test_torch_attention_is_causal() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.torch.gpt import GptLMHeadModel

    torch.manual_seed(0)
    model = GptLMHeadModel(dataclasses.replace(TINY, num_layers=2)).eval()
    ids = torch.randint(0, 12, (2, 8))
    later = ids.clone()
    later[:, 5] = (ids[:, 5] + 1) % 12
    with torch.no_grad():
        a, b = model(ids), model(later)
    assert a.shape == (2, 8, 12)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=0)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_torch_refuses_real_data_and_a_too_long_sequence() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.base import Unsupported
    from dlbench.backends.torch.data import batches, synthetic_batch

    case = get_case("gpt2_small")
    batch = synthetic_batch(case, 2, torch.device("cpu"), 16)
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 16)
    with pytest.raises(Unsupported, match="1 to 1024"):
        synthetic_batch(case, 1, torch.device("cpu"), 1025)
    real = PointSpec(
        framework="torch",
        model="gpt2_small",
        batch_size=1,
        protocol=Protocol(1, 1, 1, "median"),
        data="real",
        data_dir="/nonexistent",
    )
    with pytest.raises(Unsupported, match="real data for gpt2_small is not read yet"):
        batches(real, case, torch.device("cpu"), 0)


def test_torch_loss_is_the_next_token_cross_entropy() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.torch.gpt import GptLMHeadModel
    from dlbench.backends.torch.models import train_loss

    torch.manual_seed(0)
    case = dataclasses.replace(get_case("gpt2_small"), arch=TINY)
    model = GptLMHeadModel(TINY).eval()
    ids, labels = torch.randint(0, 12, (2, 8)), torch.randint(0, 12, (2, 8))
    loss = train_loss(case, model, {"input_ids": ids, "labels": labels})
    expected = torch.nn.functional.cross_entropy(model(ids).reshape(-1, 12), labels.reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_torch_flop_counter_agrees_with_the_megatron_formula() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.backends.torch.gpt import GptLMHeadModel
    from dlbench.backends.torch.models import train_loss

    arch = GptConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=4, max_positions=32)
    case = dataclasses.replace(get_case("gpt2_small"), arch=arch)
    ids = torch.randint(0, 100, (2, 24))
    with FlopCounterMode(display=False) as counter:
        train_loss(case, GptLMHeadModel(arch), {"input_ids": ids, "labels": ids}).backward()
    # Every matrix product forward and twice backward (the embedding's output needs its gradient, so even the
    # first layer computes its input's); the counter, like the formula, leaves element-wise work out.
    assert counter.get_total_flops() / 2 == pytest.approx(megatron_flops_per_sample(case, 24), rel=0.02)


def _point(model: str, batch: int, input_size: int | None, step_s: float) -> PointResult:
    """An ok point whose every step took step_s (metrics from the real statistics)."""
    proto = Protocol(warmup=1, steps=4, repeats=2, statistic="median")
    spec = PointSpec(framework="torch", model=model, batch_size=batch, protocol=proto, input_size=input_size)
    ranks = (RankRaw(0, tuple(RepeatRaw((step_s,) * 4, 4 * step_s) for _ in range(2))),)
    env = Environment(identity={"device": "cpu", "framework": "torch"}, descriptive={})
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), env)


def test_the_points_table_shows_tokens_and_megatron_tflops_of_a_gpt_point() -> None:
    gpt, cnn = _point("gpt2_small", 2, 32, 0.5), _point("resnet50", 2, None, 0.5)
    assert gpt.metrics is not None and gpt.metrics.throughput == pytest.approx(4.0)  # 2 samples / 0.5 s
    tokens, tflops = lm_rates("gpt2_small", {}, 32, 4.0)  # type: ignore[misc]
    assert tokens == 128 and tflops == pytest.approx(4.0 * megatron_flops_per_sample(get_case("gpt2_small"), 32) / 1e12)
    assert fmt_lm_rates(gpt) == f"\n128.0 tokens/s\n{tflops:,.3g} TFLOP/s Megatron" and fmt_lm_rates(cnn) == ""
    console = Console(file=io.StringIO(), width=400)
    console.print(points_table([gpt, cnn]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert text.count("tokens/s") == 1 and "128.0 tokens/s" in text


def test_the_case_flops_are_the_megatron_count() -> None:
    from dlbench.cases.flops import train_flops_per_sample

    case = get_case("gpt2_small")
    for size in (None, 32, 256):
        assert train_flops_per_sample(case, size) == pytest.approx(megatron_flops_per_sample(case, size), rel=1e-9)
