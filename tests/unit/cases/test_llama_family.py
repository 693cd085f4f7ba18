"""The Llama family (#35): exact parameter counts of the registered members from their published configuration
files, the shape checks of its parameters, the model-FLOPs convention (6N plus causal attention counted as half)
and `dlbench list` showing every member's count whole at 80 columns."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlbench.cases import get_case
from dlbench.cases.llama import FLOP_CONVENTION, flops_per_sample, llama_arch, matmul_params, param_count
from dlbench.spec import SpecError

# From the models' config.json (Hugging Face meta-llama): vocab, hidden, layers, heads, kv heads, intermediate.
CONFIGS = {
    "llama3_8b": (128256, 4096, 32, 32, 8, 14336, False),  # Llama-3.1-8B, tie_word_embeddings false
    "llama3_1b": (128256, 2048, 16, 32, 8, 8192, True),  # Llama-3.2-1B, tie_word_embeddings true
}
PUBLISHED = {"llama3_8b": 8_030_261_248, "llama3_1b": 1_235_814_400}


def _by_hand(v: int, h: int, layers: int, heads: int, kv: int, ffn: int, tied: bool) -> int:
    """The count worked from the config the long way: every matrix and norm of every layer, one at a time."""
    d = h // heads
    per_layer = (
        h  # input RMSNorm
        + h * heads * d
        + h * kv * d
        + h * kv * d
        + heads * d * h  # q, k, v, o
        + h  # post-attention RMSNorm
        + h * ffn
        + h * ffn
        + ffn * h
    )  # gate, up, down
    return v * h + layers * per_layer + h + (0 if tied else v * h)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_members_have_the_published_count(name: str) -> None:
    case = get_case(name)
    assert case.param_count == PUBLISHED[name] == _by_hand(*CONFIGS[name])
    v, h, layers, heads, kv, ffn, tied = CONFIGS[name]
    a = llama_arch(case)
    assert (a.vocab_size, a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads, a.ffn_size, a.tied_embeddings) == (
        v,
        h,
        layers,
        heads,
        kv,
        ffn,
        tied,
    )


def test_the_family_takes_every_shape_as_parameters() -> None:
    tiny = get_case("llama_tiny")
    assert tiny.param_count == _by_hand(1024, 128, 4, 8, 4, 352, False) < 2_000_000
    tied = get_case("llama_tiny").configured({"tied": 1})
    assert tied.param_count == tiny.param_count - 1024 * 128
    eight = get_case("llama").configured({})
    assert eight.param_count == PUBLISHED["llama3_8b"]
    one = get_case("llama").configured({"hidden": 2048, "layers": 16, "ffn": 8192, "tied": 1})
    assert one.param_count == PUBLISHED["llama3_1b"] and one.arch == get_case("llama3_1b").arch
    short = get_case("llama_tiny").configured({"seq": 16})
    assert short.input.seq_len == 16  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hidden": 100, "heads": 8}, "multiple of heads"),
        ({"heads": 8, "kv_heads": 3}, "multiple of kv_heads"),
        ({"hidden": 24, "heads": 8, "kv_heads": 4}, "must be even"),
        ({"tied": 2}, "tied must be one of 0, 1"),
        ({"window": 4}, "has no parameter window"),
    ],
)
def test_a_shape_the_decoder_cannot_take_is_refused(values: dict[str, int], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        get_case("llama_tiny").configured(values)


def test_model_flops_are_6n_plus_half_the_causal_attention() -> None:
    case = get_case("llama3_8b")
    s, layers, width = 8192, 32, 4096  # query heads x head width = hidden
    n = PUBLISHED["llama3_8b"] - 128256 * 4096  # the embedding look-up does no multiply
    assert matmul_params(case.arch) == n  # type: ignore[arg-type]
    full_attention = 12 * layers * s * width  # per token: QK^T and AV, 2 FLOPs x 2 products x 3 (fwd + bwd)
    assert flops_per_sample(case) == pytest.approx(s * (6 * n + full_attention / 2))
    assert case.train_flops_per_sample() == pytest.approx(flops_per_sample(case))
    assert flops_per_sample(case, recompute=True) == pytest.approx(flops_per_sample(case) * 4 / 3)
    assert flops_per_sample(case, 1024) == pytest.approx(1024 * (6 * n + 6 * layers * 1024 * width))
    tied = get_case("llama3_1b")  # tied: the one V x h matrix is the output projection, counted in N
    assert matmul_params(tied.arch) == PUBLISHED["llama3_1b"]  # type: ignore[arg-type]
    assert "causal" in FLOP_CONVENTION and "half" in FLOP_CONVENTION


def test_llama_counts_differ_from_any_closed_form_typo() -> None:
    """The formula in cases/llama.py and the long-hand count agree on a shape where every term differs."""
    for v, h, layers, heads, kv, ffn in ((1000, 96, 3, 6, 2, 200), (512, 64, 1, 4, 4, 64)):
        case = get_case("llama").configured(
            {
                "vocab": v,
                "hidden": h,
                "layers": layers,
                "heads": heads,
                "kv_heads": kv,
                "ffn": ffn,
                "tied": 0,
                "seq": 32,
            }
        )
        assert case.param_count == param_count(llama_arch(case)) == _by_hand(v, h, layers, heads, kv, ffn, False)


def test_list_shows_the_family_with_whole_counts_at_80_columns(
    cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("list")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    for name, count in PUBLISHED.items():
        assert name in out and f"{count:,}" in out
    assert "llama family" in out and "1,000,576" in out
