"""The MoE family (#36): Mixtral 8x7B's exact total and active counts computed from its configuration file, the
parameters reshaping a member, shapes refused, the FLOPs convention by active parameters, and its list table."""

from __future__ import annotations

import pytest
from rich.console import Console

from dlbench.cases import get_case
from dlbench.cases.moe import (
    FLOP_CONVENTION,
    active_matmul_params,
    active_param_count,
    flops_per_sample,
    moe_arch,
    param_count,
)
from dlbench.report.moe_family import moe_family_rows, moe_family_table
from dlbench.spec import SpecError

# Hugging Face mistralai/Mixtral-8x7B-v0.1 config.json: vocab_size 32000, hidden_size 4096, num_hidden_layers 32,
# num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336, num_local_experts 8,
# num_experts_per_tok 2, tie_word_embeddings false.
MIXTRAL = (32000, 4096, 32, 32, 8, 14336, 8, 2)


def _by_hand(vocab: int, h: int, layers: int, heads: int, kv: int, f: int, experts: int, used: int) -> int:
    """The count written out from the configuration, independently of cases/moe.py's helpers."""
    d = h // heads
    attention = h * h + h * kv * d + h * kv * d + h * h  # q, k, v, o
    router = h * experts
    mlp = used * 3 * h * f
    return 2 * vocab * h + layers * (2 * h + attention + router + mlp) + h


def test_mixtral_counts_match_its_configuration_exactly() -> None:
    a = moe_arch(get_case("mixtral_8x7b"))
    total = _by_hand(*MIXTRAL[:7], MIXTRAL[6])  # every expert
    active = _by_hand(*MIXTRAL)  # the top-2
    assert total == param_count(a) == get_case("mixtral_8x7b").param_count == 46_702_792_704
    assert active == active_param_count(a) == 12_879_925_248


def test_shared_experts_and_parameters_reshape_a_member() -> None:
    tiny = get_case("moe_tiny")
    a = moe_arch(tiny)
    h, f, layers = a.base.hidden_size, a.expert_ffn, a.base.num_layers
    shared = tiny.configured({"shared_experts": 1})
    assert shared.param_count - tiny.param_count == layers * 3 * h * f
    assert active_param_count(moe_arch(shared)) - active_param_count(a) == layers * 3 * h * f
    more = tiny.configured({"experts": 16})
    assert more.param_count - tiny.param_count == layers * (8 * 3 * h * f + 8 * h)  # 8 more experts, wider router
    assert active_param_count(moe_arch(more)) - active_param_count(a) == layers * 8 * h  # the router only
    sig = tiny.configured({"gate": 1, "capacity": 125})
    assert moe_arch(sig).gating == "sigmoid" and moe_arch(sig).capacity_factor == 1.25
    assert moe_arch(tiny).capacity_factor == 0.0  # dropless by default


def test_top_k_above_the_experts_is_refused() -> None:
    with pytest.raises(SpecError, match="top_k"):
        get_case("moe_tiny").configured({"top_k": 9})


def test_flops_count_active_parameters_only() -> None:
    tiny = get_case("moe_tiny")
    a = moe_arch(tiny)
    b = a.base
    s = b.max_positions
    expected = s * (6 * active_matmul_params(a) + 6 * b.num_layers * s * b.num_heads * b.head_dim)
    assert flops_per_sample(tiny) == expected
    # Doubling the routed experts (top_k fixed) adds only the router's FLOPs, not the new experts'.
    more = tiny.configured({"experts": 16})
    assert flops_per_sample(more) - flops_per_sample(tiny) == s * 6 * b.num_layers * 8 * b.hidden_size
    assert "N_active" in FLOP_CONVENTION and "router" in FLOP_CONVENTION


def test_list_table_keeps_every_count_whole_at_80_columns() -> None:
    rows = {r[0]: r for r in moe_family_rows()}
    assert rows["mixtral_8x7b"][-2:] == ("46,702,792,704", "12,879,925,248")
    console = Console(width=80, record=True, force_terminal=False)
    console.print(moe_family_table())
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "46,702,792,704" in text and "12,879,925,248" in text
