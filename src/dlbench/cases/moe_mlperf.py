"""The MoE family's MLPerf Training v6.0 members (#48): DeepSeek-V3 and GPT-OSS-20B with their exact total and
active counts, and tiny members of each shape for this CPU. Framework-free.

DeepSeek-V3 (Hugging Face deepseek-ai/DeepSeek-V3 config.json; DeepSeek-AI 2024, arXiv 2412.19437): hidden 7168,
61 layers of which the first 3 dense (SwiGLU 18432), 128 heads of multi-head latent attention (query rank 1536,
key/value rank 512, per head 128 + 64 rotary query/key widths, 128 value width), 256 routed experts of 2048 with 8
per token from the best 4 of 8 groups, one shared expert, sigmoid gating whose chosen weights are normalised and
scaled by 2.5, vocabulary 129280, untied head, RMSNorm eps 1e-6, rope_theta 10000; trained at sequence 4096 (the
paper's pretraining and MLPerf's). Its auxiliary-loss-free balance: a per-expert bias added to the scores for
the choice only, moved by 0.001 x sign(mean load - load) after each step (section 2.1.2), and the sequence-wise
auxiliary loss with alpha 0.0001 (both parameters: ``bias_rate`` and ``aux`` in units of 1e-4; MLPerf's reference
sets the auxiliary weight to 0.01, ``--param aux=100``). **Without the multi-token-prediction module**: the counts
are the main model's, as Hugging Face's DeepseekV3ForCausalLM (671,026,404,352; DeepSeek's 685B adds the MTP
module's 14B), and MLPerf's reference, which trains with one MTP layer, does more work per token than this member.

GPT-OSS-20B (Hugging Face openai/gpt-oss-20b config.json; OpenAI 2025, the gpt-oss model card): hidden 2880, 24
layers alternating sliding-window (128 tokens, the even layers) and full attention, 64 query heads of 64 over 8
key/value heads with biases and one learned sink logit per head, 32 experts of 2880 with 4 per token (router with a
bias, softmax over the chosen logits), experts with biases and GPT-OSS's clamped SwiGLU (limit 7, alpha 1.702),
vocabulary 201088, untied head, rope_theta 150000; trained at sequence 8192 with no auxiliary loss, as MLPerf's
reference (Primus: ``moe_aux_loss_coeff: 0.0``, ``moe_router_load_balancing_type: none``). RoPE without YaRN's
long-context scaling (no parameters or FLOPs change), as the Llama family leaves out Llama 3.1's.

Optimizers: DeepSeek-V3's AdamW (peak lr 2.2e-4, weight decay 0.1; section 4.2) and MLPerf's GPT-OSS reference
(lr 4e-4, weight decay 0.1); both use betas (0.9, 0.95), which dlbench's AdamW does not set (torch's 0.999).
"""

from __future__ import annotations

import dataclasses

from dlbench.cases import Case, CaseParam, Optimizer, TextInput, register
from dlbench.cases.arch import LlamaConfig, Loss, MlaConfig, MoeConfig
from dlbench.cases.moe import configure, family_params, param_count, shaped
from dlbench.spec import SpecError

RATE_UNIT = 1e-4  # `bias_rate` and `aux` count in units of 1e-4 (DeepSeek-V3: 10 and 1)

DEEPSEEK_V3 = MoeConfig(
    base=LlamaConfig(
        vocab_size=129280,
        hidden_size=7168,
        num_layers=61,
        num_heads=128,
        num_kv_heads=128,
        ffn_size=18432,
        max_positions=4096,
        tied_embeddings=False,
        rope_theta=10000.0,
        norm_eps=1e-6,
    ),
    num_experts=256,
    top_k=8,
    expert_ffn=2048,
    shared_experts=1,
    gating="sigmoid",
    mla=MlaConfig(),
    dense_layers=3,
    routed_scale=2.5,
    groups=8,
    topk_groups=4,
    bias_update_rate=0.001,
    sequence_aux=True,
)  # 671,026,404,352 parameters (without the MTP module), 37,552,508,928 active
DEEPSEEK_AUX = 0.0001  # the sequence-wise balance loss's alpha (section 4.2)
# DeepSeek-V3's shape at CPU size: 1 dense layer then 2 MoE layers of 16 fine-grained experts (top-4 from the best
# 2 of 4 groups) plus a shared one, latent attention; the experts split over 1, 2 or 4 expert-parallel ranks.
DEEPSEEK_TINY = dataclasses.replace(
    DEEPSEEK_V3,
    base=dataclasses.replace(
        DEEPSEEK_V3.base,
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        num_kv_heads=4,
        ffn_size=128,
        max_positions=64,
    ),
    num_experts=16,
    top_k=4,
    expert_ffn=32,
    mla=MlaConfig(q_rank=32, kv_rank=16, nope=16, rope=8, v=16),
    dense_layers=1,
    groups=4,
    topk_groups=2,
)

GPT_OSS_20B = MoeConfig(
    base=LlamaConfig(
        vocab_size=201088,
        hidden_size=2880,
        num_layers=24,
        num_heads=64,
        num_kv_heads=8,
        ffn_size=2880,
        max_positions=8192,
        tied_embeddings=False,
        rope_theta=150000.0,
    ),
    num_experts=32,
    top_k=4,
    expert_ffn=2880,
    head_dim=64,
    attention_bias=True,
    sinks=True,
    sliding_window=128,
    router_bias=True,
    expert_bias=True,
    clamped_swiglu=True,
)  # 20,914,757,184 parameters, 3,604,541,952 active
# GPT-OSS's shape at CPU size: a sliding-window layer (16 tokens) and a full one, 8 heads of 16 (wider than the
# hidden 64, as GPT-OSS's), sinks and biases, 8 experts of 64 with biases, top-2.
GPT_OSS_TINY = dataclasses.replace(
    GPT_OSS_20B,
    base=dataclasses.replace(
        GPT_OSS_20B.base,
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=8,
        num_kv_heads=2,
        ffn_size=64,
        max_positions=64,
    ),
    num_experts=8,
    top_k=2,
    expert_ffn=64,
    head_dim=16,
    sliding_window=16,
)


DEEPSEEK_PARAMS = ("dense_layers", "ffn", "q_rank", "kv_rank", "groups", "topk_groups", "bias_rate", "aux")


def _deepseek_params(a: MoeConfig) -> tuple[CaseParam, ...]:
    """DeepSeek-V3's own parameters beside the family's."""
    assert a.mla is not None
    return (
        CaseParam("dense_layers", a.dense_layers, "first layers with a dense SwiGLU MLP (DeepSeek-V3: 3)", minimum=0),
        CaseParam("ffn", a.base.ffn_size, "SwiGLU width of the dense layers (18432)"),
        CaseParam("q_rank", a.mla.q_rank, "latent attention's query rank; 0: one query projection (1536)", minimum=0),
        CaseParam("kv_rank", a.mla.kv_rank, "latent attention's key/value rank (512)"),
        CaseParam("groups", a.groups, "expert groups of group-limited routing; divides experts (8)"),
        CaseParam("topk_groups", a.topk_groups, "groups a token's experts come from (4)"),
        CaseParam(
            "bias_rate",
            round(a.bias_update_rate / RATE_UNIT),
            "auxiliary-loss-free balance: the routing bias's step per training step, in 1e-4 (10 = 0.001); 0: off",
            minimum=0,
        ),
        CaseParam(
            "aux",
            round(DEEPSEEK_AUX / RATE_UNIT),
            "sequence-wise auxiliary loss weight in 1e-4 (DeepSeek-V3: 1; MLPerf's reference: 100); 0: off",
            minimum=0,
        ),
    )


def _gpt_oss_params(a: MoeConfig) -> tuple[CaseParam, ...]:
    """GPT-OSS's own parameters beside the family's."""
    return (
        CaseParam("head_dim", a.head_dim, "width of one attention head (GPT-OSS: 64, not hidden / heads)"),
        CaseParam(
            "window", a.sliding_window, "sliding window of the even layers in tokens (128); 0: all full", minimum=0
        ),
    )


def _deepseek(case: Case) -> Case:
    """A DeepSeek-shaped member at its parameters (the family's, then its own), checked."""
    a = configure(case)
    assert a.mla is not None
    v = {n: case.param(n) for n in DEEPSEEK_PARAMS}
    if v["dense_layers"] > a.base.num_layers:
        raise SpecError(f"case {case.name}: dense_layers ({v['dense_layers']}) is above layers ({a.base.num_layers})")
    groups, chosen = v["groups"], v["topk_groups"]
    if a.num_experts % groups or chosen > groups or a.top_k > chosen * (a.num_experts // groups):
        raise SpecError(
            f"case {case.name}: groups ({groups}) must divide experts ({a.num_experts}), topk_groups ({chosen}) be at "
            f"most groups, and the chosen groups hold at least top_k ({a.top_k}) experts"
        )
    arch = dataclasses.replace(
        a,
        base=dataclasses.replace(a.base, ffn_size=v["ffn"]),
        mla=dataclasses.replace(a.mla, q_rank=v["q_rank"], kv_rank=v["kv_rank"]),
        dense_layers=v["dense_layers"],
        groups=groups,
        topk_groups=chosen,
        bias_update_rate=v["bias_rate"] * RATE_UNIT,
    )
    return shaped(case, arch, aux_weight=v["aux"] * RATE_UNIT)


def _gpt_oss(case: Case) -> Case:
    """A GPT-OSS-shaped member at its parameters (the family's, then its own)."""
    a = configure(case)
    head_dim, window = case.param("head_dim"), case.param("window")
    if head_dim % 2:
        raise SpecError(f"case {case.name}: head_dim ({head_dim}) must be even: rotary embedding turns pairs")
    return shaped(case, dataclasses.replace(a, head_dim=head_dim, sliding_window=window))


DEEPSEEK_OPTIMIZER = Optimizer("adamw", lr=2.2e-4, weight_decay=0.1)
GPT_OSS_OPTIMIZER = Optimizer("adamw", lr=4e-4, weight_decay=0.1)
TINY_OPTIMIZER = Optimizer("adamw", lr=1e-3, weight_decay=0.1)  # the tiny members reach --converge's target


def _member(name: str, title: str, arch: MoeConfig, optimizer: Optimizer, aux: float, batch: int, notes: str) -> Case:
    """Register one member: its shape as parameter defaults (the family's and its own), its exact count."""
    deepseek = arch.mla is not None
    own = _deepseek_params(arch) if deepseek else _gpt_oss_params(arch)
    return register(
        Case(
            name=name,
            title=title,
            task="causal_lm",
            input=TextInput(seq_len=arch.base.max_positions, vocab=arch.base.vocab_size),
            optimizer=optimizer,
            param_count=param_count(arch),
            batch_fixed=batch,
            batch_cpu=batch,
            arch=arch,
            loss=Loss("causal_lm", aux_weight=aux),
            notes=notes,
            params=family_params(arch) + own,
            derive=_deepseek if deepseek else _gpt_oss,
        )
    )


DEEPSEEK_V3_CASE = _member(
    "deepseek_v3",
    "DeepSeek-V3",
    DEEPSEEK_V3,
    DEEPSEEK_OPTIMIZER,
    DEEPSEEK_AUX,
    1,
    "DeepSeek-V3 without its MTP module: latent attention, 3 dense layers, 256 routed experts (top-8 of the best "
    "4 of 8 groups) + 1 shared, sigmoid gating with the bias balance and the sequence-wise auxiliary loss, "
    "sequence 4096.",
)
DEEPSEEK_TINY_CASE = _member(
    "deepseek_tiny",
    "DeepSeek tiny",
    DEEPSEEK_TINY,
    TINY_OPTIMIZER,
    DEEPSEEK_AUX,
    8,
    "DeepSeek-V3's shape for CPU tests: latent attention, 1 dense + 2 MoE layers of 16 experts (top-4 of the best "
    "2 of 4 groups) + 1 shared, over 1, 2 or 4 expert-parallel ranks.",
)
GPT_OSS_20B_CASE = _member(
    "gpt_oss_20b",
    "GPT-OSS-20B",
    GPT_OSS_20B,
    GPT_OSS_OPTIMIZER,
    0.0,
    1,
    "GPT-OSS-20B: alternating sliding-window (128) and full attention with sinks and biases, 32 experts with "
    "biases (top-4, clamped SwiGLU), no auxiliary loss (MLPerf's reference), sequence 8192.",
)
GPT_OSS_TINY_CASE = _member(
    "gpt_oss_tiny",
    "GPT-OSS tiny",
    GPT_OSS_TINY,
    TINY_OPTIMIZER,
    0.0,
    8,
    "GPT-OSS's shape for CPU tests: a sliding-window (16) and a full layer with sinks and biases, 8 experts of 64 "
    "with biases, top-2, over 1, 2 or 4 expert-parallel ranks.",
)

__all__ = [
    "DEEPSEEK_AUX",
    "DEEPSEEK_TINY",
    "DEEPSEEK_V3",
    "GPT_OSS_20B",
    "GPT_OSS_TINY",
    "RATE_UNIT",
]
