"""LoRA on the Llama family (#47): llama2_70b's exact count from its published configuration, MLPerf's adapters'
trainable count worked by hand (a fused-QKV Llama 2 70B, r 16 on qkv_proj and o_proj), the other target sets,
the FLOP conventions, and the refusals of what is not wired."""

from __future__ import annotations

import pytest

from dlbench.cases import get_case
from dlbench.cases.llama import flops_per_sample, matmul_params
from dlbench.refusals import refusal
from dlbench.spec import PointSpec, Protocol, SpecError
from tests.support.specs import flat_spec

# meta-llama/Llama-2-70b-hf config.json
V, H, LAYERS, HEADS, KV, FFN = 32000, 8192, 80, 64, 8, 28672


def test_llama2_70b_has_the_published_count() -> None:
    d = H // HEADS
    per_layer = 2 * H + H * HEADS * d + 2 * H * KV * d + HEADS * d * H + 3 * H * FFN
    assert get_case("llama2_70b").param_count == 2 * V * H + LAYERS * per_layer + H == 68_976_648_192


def test_mlperfs_adapters_train_44_6_million() -> None:
    case = get_case("llama2_70b").configured({"lora": 16})
    kv = KV * (H // HEADS)
    qkv = 16 * H + (H + 2 * kv) * 16  # one A over the input, one B over the fused q | k | v output
    o = 16 * H + H * 16
    assert case.param_count == LAYERS * (qkv + o) == 44_564_480
    assert case.optimizer.name == "adamw" and case.optimizer.lr == 4e-4 and case.optimizer.weight_decay == 1e-4


@pytest.mark.parametrize(
    ("targets", "per_layer"),
    [(1, 8 * (128 + 128) + 8 * (128 + 64)), (2, 8 * (128 + 256) + 8 * 256 + 3 * 8 * (128 + 352))],
    ids=["q_v", "all_linear"],
)
def test_the_other_target_sets(targets: int, per_layer: int) -> None:
    assert get_case("llama_tiny").configured({"lora": 8, "lora_targets": targets}).param_count == 4 * per_layer


def test_lora_flops_leave_out_the_frozen_weight_gradients() -> None:
    tiny = get_case("llama_tiny")
    lora = tiny.configured({"lora": 8})
    n, s, attention = matmul_params(tiny.arch), 64, 6 * 4 * 64 * 8 * 16  # type: ignore[arg-type]
    assert flops_per_sample(lora) == s * (4 * n + 6 * lora.param_count + attention)
    assert flops_per_sample(lora, full_model=True) == flops_per_sample(tiny) == s * (6 * n + attention)
    assert lora.train_flops_per_sample() == pytest.approx(flops_per_sample(lora))  # what MFU divides


def test_a_dropout_of_100_percent_is_refused() -> None:
    with pytest.raises(SpecError, match="lora_dropout"):
        get_case("llama_tiny").configured({"lora": 8, "lora_dropout": 100})


def _spec(framework: str, model: str, params: dict[str, int], **kw: object) -> PointSpec:
    return flat_spec(
        framework=framework,
        model=model,
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=tuple(sorted(params.items())),
        **kw,
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (_spec("torch", "llama_tiny", {"lora": 8}, devices_per_node=2, tensor_parallel=2), "tensor or pipeline"),
        (_spec("jax", "llama_tiny", {"lora": 8}, devices_per_node=2, fsdp=True), "wired for torch only"),
        (_spec("tf", "llama_tiny", {"lora": 8}), "torch and JAX only"),
        (_spec("jax", "dlrm_tiny", {"sharding": 1}, devices_per_node=2), "torch only"),
        (_spec("torch", "dlrm_tiny", {}, devices_per_node=2, strategy="allreduce"), "use --strategy ddp"),
    ],
    ids=["lora_tp", "jax_lora_fsdp", "tf_lora", "jax_table_wise", "dlrm_allreduce"],
)
def test_what_is_not_wired_is_refused_in_one_line(spec: PointSpec, words: str) -> None:
    reason = refusal(spec)
    assert reason is not None and words in reason and "\n" not in reason


def test_what_is_wired_is_not_refused() -> None:
    assert refusal(_spec("torch", "llama_tiny", {"lora": 8}, devices_per_node=2, fsdp=True)) is None
    assert refusal(_spec("torch", "dlrm_tiny", {"sharding": 1}, devices_per_node=2)) is None
    assert refusal(_spec("jax", "llama_tiny", {"lora": 8})) is None
    assert refusal(_spec("torch", "dlrm_tiny", {"sharding": 1})) is None  # one device holds every table


def test_a_lora_point_converges_on_a_shifted_chain_from_a_cached_base() -> None:
    from dlbench.analysis.targets import target_for
    from dlbench.cases.lora import SHIFTED_ROWS, base_key
    from dlbench.data.learnable import MarkovTokens, learnable_batches, pretraining_batches

    lora = get_case("llama_tiny").configured({"lora": 8, "seq": 16})
    pretrain, shifted = MarkovTokens(64), MarkovTokens(64, shifted=SHIFTED_ROWS)
    same = pretrain.transition[SHIFTED_ROWS:] == shifted.transition[SHIFTED_ROWS:]
    assert same.all() and not (pretrain.transition[:SHIFTED_ROWS] == shifted.transition[:SHIFTED_ROWS]).all()
    target = target_for(lora)
    assert target is not None and target.loss == round(shifted.best_loss + 0.40, 3)
    assert next(pretraining_batches(lora, None))["input_ids"].shape == (8, 16)
    first = next(learnable_batches(lora, 4, None, 0))["input_ids"]
    assert first.shape == (4, 16) and first.max() < 64
    assert base_key(lora, "torch", None) == base_key(
        get_case("llama_tiny").configured({"lora": 4, "seq": 16}), "torch", None
    )
    assert base_key(lora, "torch", None) != base_key(lora, "jax", None) != base_key(lora, "jax", 8)
