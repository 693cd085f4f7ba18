"""A MoE point's decoder figures (#36): TFLOP/s and MFU by active parameters (the router and the experts each token
visits), the convention named in the point's figures, and its total and active parameter counts. Points are built
with constant step times (tests.support.reports) so that every figure is exact; no figure here was measured."""

from __future__ import annotations

import pytest

from dlbench.analysis.llm import flop_convention, llm_figures
from dlbench.cases import get_case
from dlbench.cases.gpt import flop_label
from dlbench.cases.moe import flops_per_sample
from tests.support.reports import llm_point


def test_mixtral_figures_count_active_parameters_and_name_it() -> None:
    f = llm_figures(llm_point("mixtral_8x7b", 2.0, 8, "bf16"))
    assert f is not None
    sequences_per_s = 2 * 8 / 2.0
    per_device = sequences_per_s * flops_per_sample(get_case("mixtral_8x7b")) / 8 / 1e12
    assert f.model_tflops_per_device == pytest.approx(per_device)
    assert f.mfu_bf16 == pytest.approx(per_device / 989.5)
    assert f.tokens_per_s == pytest.approx(sequences_per_s * 4096)
    assert "N_active" in f.flop_convention and f.flop_convention == flop_convention("mixtral_8x7b")
    assert (f.params_total, f.params_active) == (46_702_792_704, 12_879_925_248)
    assert flop_label("mixtral_8x7b") == "6Nact+attn/2"


def test_a_dense_decoder_has_no_moe_counts() -> None:
    f = llm_figures(llm_point("llama_tiny", 0.001, 1, "bf16"))
    assert f is not None and f.params_active is None and f.params_total is None
