"""DeepSeek-V3 and GPT-OSS-20B (#48): exact total and active counts written out from their configuration files,
independently of cases/moe.py's helpers; the tiny members' shapes; parameters that reshape or are refused; the
FLOPs convention for latent attention and sliding windows; the list table."""

from __future__ import annotations

import pytest
from rich.console import Console

from dlbench.cases import get_case
from dlbench.cases.moe import active_param_count, flops_per_sample, moe_arch, param_count
from dlbench.report.moe_family import moe_family_rows, moe_family_table
from dlbench.spec import SpecError

# Hugging Face deepseek-ai/DeepSeek-V3 config.json (the keys' own names).
DEEPSEEK = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
# Hugging Face openai/gpt-oss-20b config.json.
GPT_OSS = {
    "vocab_size": 201088,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
}


def _deepseek_by_hand(c: dict[str, int], routed: int) -> int:
    """DeepSeek-V3's count from its configuration: latent attention, dense first layers, routed + shared experts;
    `routed` experts per MoE layer (all of them, or the ones a token visits)."""
    h, heads, q, kv = c["hidden_size"], c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_proj = h * q + q + q * heads * (nope + rope)  # q_a_proj, q_a_layernorm, q_b_proj
    kv_proj = h * (kv + rope) + kv + kv * heads * (nope + v)  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    attention = q_proj + kv_proj + heads * v * h  # o_proj
    dense_mlp = 3 * h * c["intermediate_size"]
    f = c["moe_intermediate_size"]
    moe_mlp = h * c["n_routed_experts"] + routed * 3 * h * f + c["n_shared_experts"] * 3 * h * f  # router, experts
    dense, moe = c["first_k_dense_replace"], c["num_hidden_layers"] - c["first_k_dense_replace"]
    return 2 * c["vocab_size"] * h + dense * (2 * h + attention + dense_mlp) + moe * (2 * h + attention + moe_mlp) + h


def _gpt_oss_by_hand(c: dict[str, int], routed: int) -> int:
    """GPT-OSS's count: biased q/k/v/o projections and one sink per head; a biased router; experts with biases."""
    h, heads, kv, d, f = (
        c["hidden_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
        c["intermediate_size"],
    )
    attention = (h * heads * d + heads * d) + 2 * (h * kv * d + kv * d) + (heads * d * h + h) + heads
    experts = c["num_local_experts"]
    router = h * experts + experts
    expert = h * 2 * f + 2 * f + f * h + h  # gate_up_proj and its bias, down_proj and its bias
    layer = 2 * h + attention + router + routed * expert
    return 2 * c["vocab_size"] * h + c["num_hidden_layers"] * layer + h


def test_deepseek_v3_counts_match_its_configuration_exactly() -> None:
    case = get_case("deepseek_v3")
    a = moe_arch(case)
    total = _deepseek_by_hand(DEEPSEEK, DEEPSEEK["n_routed_experts"])
    active = _deepseek_by_hand(DEEPSEEK, DEEPSEEK["num_experts_per_tok"])
    assert total == param_count(a) == case.param_count == 671_026_404_352  # without the MTP module
    assert active == active_param_count(a) == 37_552_282_624  # DeepSeek-V3's "37B activated"


def test_gpt_oss_20b_counts_match_its_configuration_exactly() -> None:
    case = get_case("gpt_oss_20b")
    a = moe_arch(case)
    total = _gpt_oss_by_hand(GPT_OSS, GPT_OSS["num_local_experts"])
    active = _gpt_oss_by_hand(GPT_OSS, GPT_OSS["num_experts_per_tok"])
    assert total == param_count(a) == case.param_count == 20_914_757_184  # the model card's 20.91B
    assert active == active_param_count(a) == 4_187_440_704
    # The model card's 3.61B active leaves out the token embedding, which the family's convention counts.
    assert active - GPT_OSS["vocab_size"] * GPT_OSS["hidden_size"] == 3_608_307_264


@pytest.mark.parametrize("name", ["deepseek_tiny", "gpt_oss_tiny"])
def test_tiny_members_are_their_shapes_at_cpu_size(name: str) -> None:
    case = get_case(name)
    a = moe_arch(case)
    assert case.param_count == param_count(a) < 500_000
    assert case.configured({"layers": a.base.num_layers}).param_count == case.param_count
    if name == "deepseek_tiny":
        assert a.mla is not None and a.dense_layers == 1 and a.shared_experts == 1 and a.groups > 1
        assert a.gating == "sigmoid" and a.sequence_aux and a.bias_update_rate == 0.001
    else:
        assert a.sinks and a.attention_bias and a.expert_bias and a.router_bias and a.clamped_swiglu
        assert a.sliding_window and a.head_dim * a.base.num_heads != a.base.hidden_size
        assert case.loss.aux_weight == 0.0  # MLPerf's GPT-OSS reference trains without one


def test_deepseek_parameters_reshape_and_switch_the_balance_off() -> None:
    tiny = get_case("deepseek_tiny")
    off = tiny.configured({"aux": 0, "bias_rate": 0})
    assert off.loss.aux_weight == 0.0 and moe_arch(off).bias_update_rate == 0.0
    assert tiny.loss.aux_weight == pytest.approx(1e-4)
    mlperf = tiny.configured({"aux": 100})  # MLPerf's reference weight, 0.01
    assert mlperf.loss.aux_weight == pytest.approx(0.01)
    a = moe_arch(tiny)
    h = a.base.hidden_size
    more_dense = tiny.configured({"dense_layers": 2})
    assert a.mla is not None
    # One MoE layer becomes dense: its router, routed and shared experts out, one dense SwiGLU in.
    moe_mlp = h * a.num_experts + a.num_experts * 3 * h * a.expert_ffn + 3 * h * a.expert_ffn
    assert more_dense.param_count - tiny.param_count == 3 * h * a.base.ffn_size - moe_mlp
    no_q_rank = tiny.configured({"q_rank": 0})
    heads, m = a.base.num_heads, a.mla
    assert no_q_rank.param_count - tiny.param_count == a.base.num_layers * (
        h * heads * m.qk_dim - (h * m.q_rank + m.q_rank + m.q_rank * heads * m.qk_dim)
    )


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("deepseek_tiny", {"groups": 3}, "groups"),
        ("deepseek_tiny", {"topk_groups": 1, "top_k": 5}, "top_k"),  # one group of 4 experts cannot give 5
        ("deepseek_tiny", {"dense_layers": 4}, "dense_layers"),
        ("gpt_oss_tiny", {"head_dim": 15}, "head_dim"),
    ],
)
def test_shapes_the_decoder_cannot_take_are_refused(name: str, params: dict[str, int], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        get_case(name).configured(params)


def test_flops_count_latent_widths_and_sliding_windows() -> None:
    ds = get_case("deepseek_tiny")
    a = moe_arch(ds)
    assert a.mla is not None
    s, heads, layers = a.base.max_positions, a.base.num_heads, a.base.num_layers
    n_active = active_param_count(a) - a.base.vocab_size * a.base.hidden_size
    attention = layers * 6 * (s / 2) * heads * (a.mla.nope + a.mla.rope + a.mla.v)
    assert flops_per_sample(ds) == pytest.approx(s * (6 * n_active + attention))
    oss = get_case("gpt_oss_tiny")
    b = moe_arch(oss)
    s, w, heads, d = b.base.max_positions, b.sliding_window, b.base.num_heads, b.head_dim
    n_active = active_param_count(b) - b.base.vocab_size * b.base.hidden_size
    # layer 0 sees a window of w keys (w - w^2 / 2s on average by the convention), layer 1 the causal half
    attention = 6 * heads * 2 * d * ((w - w * w / (2 * s)) + s / 2)
    assert flops_per_sample(oss) == pytest.approx(s * (6 * n_active + attention))
    full = oss.configured({"window": 0})
    assert flops_per_sample(full) > flops_per_sample(oss)


def test_list_table_shows_the_new_members_whole_at_80_columns() -> None:
    rows = {r[0]: r for r in moe_family_rows()}
    assert rows["deepseek_v3"][-2:] == ("671,026,404,352", "37,552,282,624")
    assert rows["deepseek_v3"][3] == "256+1"
    assert rows["gpt_oss_20b"][-2:] == ("20,914,757,184", "4,187,440,704")
    console = Console(width=80, record=True, force_terminal=False)
    console.print(moe_family_table())
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "671,026,404,352" in text and "37,552,282,624" in text and "4,187,440,704" in text
