"""MLPerf v6.0's new members (#48) against the reference libraries' own models built on the meta device (no
weights, no download): Hugging Face transformers' DeepseekV3ForCausalLM and GptOssForCausalLM and diffusers'
FluxTransformer2DModel from their configurations (test-only dependencies, the `test` extra), equal to the cases'
counts to the parameter; the MoE's active counts by the libraries' expert tensors (an expert's share of them is
1 / experts)."""

from __future__ import annotations

import pytest

from dlbench.cases import get_case
from dlbench.cases.moe import active_param_count, moe_arch

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
HOW = "pip install -e '.[test]' (a test-only dependency)"

# openai/gpt-oss-20b's config.json (GptOssConfig's defaults are gpt-oss-120b's).
GPT_OSS_20B = {
    "num_hidden_layers": 24,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
}


def _counts(model: torch.nn.Module, top_k: int, experts: int) -> tuple[int, int]:
    """(total, active) of a Hugging Face MoE model: the routed experts' tensors count top_k / experts of theirs."""
    total = routed = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if ".mlp.experts." in name:
            routed += p.numel()
    assert routed % experts == 0
    return total, total - routed + routed // experts * top_k


def test_deepseek_v3_equals_hugging_faces_model() -> None:
    transformers = pytest.importorskip("transformers", reason=f"transformers is not installed: {HOW}")
    config = transformers.DeepseekV3Config()  # deepseek-ai/DeepSeek-V3's shape
    assert config.num_nextn_predict_layers == 1  # the checkpoint's MTP layer, which the model class leaves out
    with torch.device("meta"):
        model = transformers.DeepseekV3ForCausalLM(config)
    total, active = _counts(model, config.num_experts_per_tok, config.n_routed_experts)
    case = get_case("deepseek_v3")
    assert (total, active) == (case.param_count, active_param_count(moe_arch(case)))


def test_gpt_oss_20b_equals_hugging_faces_model() -> None:
    transformers = pytest.importorskip("transformers", reason=f"transformers is not installed: {HOW}")
    config = transformers.GptOssConfig(**GPT_OSS_20B)
    assert config.layer_types[:2] == ["sliding_attention", "full_attention"]
    with torch.device("meta"):
        model = transformers.GptOssForCausalLM(config)
    total, active = _counts(model, config.num_experts_per_tok, config.num_local_experts)
    case = get_case("gpt_oss_20b")
    assert (total, active) == (case.param_count, active_param_count(moe_arch(case)))


@pytest.mark.parametrize("guidance", [False, True])
def test_flux1_equals_diffusers_transformer(guidance: bool) -> None:
    """FluxTransformer2DModel's defaults are FLUX.1's (19 double, 38 single blocks, 24 heads of 128, 64 channels,
    joint attention 4096, pooled 768); schnell has no guidance embedding (MLPerf's model), dev has one."""
    diffusers = pytest.importorskip("diffusers", reason=f"diffusers is not installed: {HOW}")
    with torch.device("meta"):
        model = diffusers.FluxTransformer2DModel(guidance_embeds=guidance)
    total = sum(p.numel() for p in model.parameters())
    assert total == get_case("flux1").configured({"guidance": int(guidance)}).param_count
