"""The MoE family (#36, #48): a decoder on the Llama family's blocks whose MLPs are mixtures of top-k routed SwiGLU
experts (plus optional shared experts), with its shape and routing as parameters, its registered members, its
exact total and active parameter counts and its model-FLOPs formula. Framework-free.

Parameters, per layer of width h with H query heads of width d and K key/value heads, E routed experts and S
shared experts each f wide: ``2 h`` (two RMSNorms) + attention + the MLP, plus ``V h`` (x2 untied) and the final
norm. Attention, grouped-query: ``2 h H d + 2 h K d`` (q, o; k, v), with `attention_bias` ``+ H d + 2 K d + h``,
with `sinks` ``+ H``; multi-head latent attention (`mla`, DeepSeek-V2/V3) with query rank q, key/value rank c,
per head n + r query/key widths (r rotary) and v value width: ``h q + q + q H (n + r)`` (no query rank: ``h H
(n + r)``) ``+ h (c + r) + c + c H (n + v) + H v h``. The MLP of a MoE layer: ``h E`` (the router; ``+ E`` with
`router_bias`) ``+ E (3 h f)`` (each expert's gate, up and down matrices; ``+ 2 f + h`` each with `expert_bias`)
``+ 3 h S f`` (the shared experts, one SwiGLU S f wide, no biases); of the first `dense_layers` layers, one dense
SwiGLU ``3 h F`` (F: the base's ffn_size).

"Active" parameters are those one token's forward pass uses: the embedding row it looks up counted as the whole
embedding (as model cards count it), the LM head, every norm and attention matrix, the whole router (it scores
every expert) and the `top_k` routed experts plus the shared experts it visits: the formula above with E replaced
by top_k in the experts' term only. DeepSeek-V3's routing bias (auxiliary-loss-free balance) is a buffer, not a
trainable parameter (as in Hugging Face's DeepseekV3 model).

Model FLOPs of one sequence of s tokens (``FLOP_CONVENTION``): ``s (6 N_active + sum over layers of 6 k_eff H
(d_qk + d_v))``, N_active being the active parameters that multiply (all but the embedding look-up; a tied head
counts once): the router's and the visited experts' matrices count, the unvisited experts' do not. The attention
term counts each query's keys k_eff: s / 2 under a causal mask (half of the square, as MaxText and the Llama
family), ``W - W^2 / (2 s)`` in a sliding-window layer of W < s keys (the same rule: the mean keys a query sees,
less the diagonal's half); d_qk = d_v = d for grouped-query attention, n + r and v for latent attention. Dropped
tokens are not subtracted: the convention counts the routed work a dropless run does.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from dlbench.cases import Case, CaseParam, TextInput
from dlbench.cases.arch import LlamaConfig, Loss, MoeConfig
from dlbench.cases.flops import register_forward_flops
from dlbench.cases.llama import OPTIMIZER, decoder_member
from dlbench.spec import SpecError

FLOP_CONVENTION = (
    "6 N_active + 6 l s H d per token: N_active = attention, router, top_k routed and the shared experts' matrices "
    "and the head (no embedding look-up); causal attention counted as half, as MaxText (latent attention: "
    "d_qk + d_v for 2d; a sliding window: its keys)"
)
GATINGS: tuple[Literal["softmax"], Literal["sigmoid"]] = ("softmax", "sigmoid")  # the `gate` parameter's 0 and 1
AUX_LOSS_WEIGHT = 0.01  # Switch Transformer's alpha (Fedus et al. 2021, section 2.2)

# Mixtral 8x7B's shape, from its configuration file (Hugging Face mistralai/Mixtral-8x7B-v0.1 config.json): hidden
# 4096, 32 layers, 32 heads over 8 key/value heads, intermediate 14336, vocabulary 32000, 8 local experts, 2 per
# token, untied head, rope_theta 1e6. Trained here at sequence 4096 (torchtitan's and Megatron's Mixtral recipes).
MIXTRAL_8X7B = MoeConfig(
    base=LlamaConfig(
        vocab_size=32000,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        ffn_size=14336,
        max_positions=4096,
        tied_embeddings=False,
        rope_theta=1e6,
    ),
    num_experts=8,
    top_k=2,
    expert_ffn=14336,
)  # 46,702,792,704 parameters, 12,879,925,248 active
# A shape this CPU trains in seconds whose 8 experts split over 1, 2 or 4 expert-parallel ranks.
MOE_TINY = MoeConfig(
    base=LlamaConfig(
        vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, ffn_size=128, max_positions=64
    ),
    num_experts=8,
    top_k=2,
    expert_ffn=128,
)

PARAM_NAMES = (
    "hidden",
    "layers",
    "heads",
    "kv_heads",
    "vocab",
    "seq",
    "tied",
    "experts",
    "top_k",
    "expert_ffn",
    "shared_experts",
    "capacity",
    "gate",
)


def head_width(a: MoeConfig) -> int:
    """Grouped-query attention's head width: `head_dim` where the shape sets it (GPT-OSS), else hidden / heads."""
    return a.head_dim or a.base.head_dim


def attention_params(a: MoeConfig) -> int:
    """Parameters of one layer's attention: grouped-query or latent (this module's docstring)."""
    b = a.base
    h, heads = b.hidden_size, b.num_heads
    if a.mla is not None:
        m = a.mla
        q = h * m.q_rank + m.q_rank + m.q_rank * heads * m.qk_dim if m.q_rank else h * heads * m.qk_dim
        kv = h * (m.kv_rank + m.rope) + m.kv_rank + m.kv_rank * heads * (m.nope + m.v)
        return q + kv + heads * m.v * h
    d, kv_heads = head_width(a), b.num_kv_heads
    biases = heads * d + 2 * kv_heads * d + h if a.attention_bias else 0
    return 2 * h * heads * d + 2 * h * kv_heads * d + biases + (heads if a.sinks else 0)


def expert_params(a: MoeConfig) -> int:
    """Parameters of one routed expert: a SwiGLU expert_ffn wide (with its biases where the shape has them)."""
    h, f = a.base.hidden_size, a.expert_ffn
    return 3 * h * f + (2 * f + h if a.expert_bias else 0)


def _layer(a: MoeConfig, experts: int) -> int:
    """Parameters of one MoE layer whose MLP holds (or, for one token, visits) `experts` routed experts."""
    h, e = a.base.hidden_size, a.num_experts
    router = h * e + (e if a.router_bias else 0)
    shared = 3 * h * a.shared_experts * a.expert_ffn
    return 2 * h + attention_params(a) + router + experts * expert_params(a) + shared


def _dense_layer(a: MoeConfig) -> int:
    """Parameters of one of the first `dense_layers` layers: attention and one dense SwiGLU ffn_size wide."""
    h = a.base.hidden_size
    return 2 * h + attention_params(a) + 3 * h * a.base.ffn_size


def _layers(a: MoeConfig, experts: int) -> int:
    """Parameters of every layer, each MoE layer holding (or visiting) `experts` routed experts."""
    moe = a.base.num_layers - a.dense_layers
    return a.dense_layers * _dense_layer(a) + moe * _layer(a, experts)


def _embeddings(a: MoeConfig) -> int:
    """The token embedding and, untied, the LM head."""
    return a.base.vocab_size * a.base.hidden_size * (1 if a.base.tied_embeddings else 2)


def param_count(a: MoeConfig) -> int:
    """Trainable parameters of the MoE decoder, every expert included (this module's docstring)."""
    return _embeddings(a) + _layers(a, a.num_experts) + a.base.hidden_size


def active_param_count(a: MoeConfig) -> int:
    """Parameters one token's forward pass uses: embeddings, head, norms, attention, the router and the top_k
    routed plus the shared experts (this module's docstring)."""
    return _embeddings(a) + _layers(a, a.top_k) + a.base.hidden_size


def active_matmul_params(a: MoeConfig) -> int:
    """N_active of the 6N rule: the active parameters but the embedding look-up (a tied head counts once)."""
    return active_param_count(a) - (0 if a.base.tied_embeddings else a.base.vocab_size * a.base.hidden_size)


def moe_arch(case: Case) -> MoeConfig:
    """The case's MoE architecture."""
    if not isinstance(case.arch, MoeConfig):
        raise TypeError(f"case {case.name} is not a mixture of experts")
    return case.arch


def attended_keys(a: MoeConfig, layer: int, s: float) -> float:
    """The keys one query of a sequence of s tokens counts in `layer` (this module's docstring): s / 2 causal,
    W - W^2 / (2 s) in a sliding-window layer of W < s keys."""
    w = a.sliding_window
    if w and layer % 2 == 0 and w < s:
        return w - w * w / (2.0 * s)
    return s / 2.0


def attention_flops_per_token(a: MoeConfig, s: float) -> float:
    """Training FLOPs of the attention scores and weighted values per token, summed over the layers."""
    heads = a.base.num_heads
    if a.mla is not None:
        widths = float(a.mla.qk_dim + a.mla.v)
    else:
        widths = 2.0 * head_width(a)
    return sum(6.0 * attended_keys(a, i, s) * heads * widths for i in range(a.base.num_layers))


def flops_per_sample(case: Case, input_size: int | None = None) -> float:
    """Training FLOPs of one sequence by FLOP_CONVENTION (active parameters)."""
    a = moe_arch(case)
    s = float(input_size or a.base.max_positions)
    return s * (6.0 * active_matmul_params(a) + attention_flops_per_token(a, s))


def point_figures(case: Case, input_size: int | None = None) -> dict[str, object]:
    """What a MoE point records about its model: total and active parameters, the routing policy (gating, top_k,
    capacity factor or dropless, shared experts, the auxiliary loss's weight) and its FLOPs of one sequence by
    active parameters with their convention named."""
    a = moe_arch(case)
    flops = flops_per_sample(case, input_size)
    return {
        "params_total": param_count(a),
        "params_active": active_param_count(a),
        "experts": a.num_experts,
        "top_k": a.top_k,
        "shared_experts": a.shared_experts,
        "gating": a.gating,
        "capacity": "dropless" if a.capacity_factor == 0 else f"capacity factor {a.capacity_factor:g}",
        "aux_loss_weight": case.loss.aux_weight,
        "aux_loss": "sequence-wise (DeepSeek-V3)" if a.sequence_aux else "batch-wise (Switch Transformer)",
        "bias_update_rate": a.bias_update_rate,
        "routed_scale": a.routed_scale,
        "group_limited": f"top {a.topk_groups} of {a.groups} groups" if a.groups > 1 else "no",
        "attention": attention_kind(a),
        "flops_per_sample": {"model": flops, "hardware": flops, "convention": FLOP_CONVENTION},
    }


def attention_kind(a: MoeConfig) -> str:
    """The attention a MoE shape runs, in words (for its facts)."""
    if a.mla is not None:
        m = a.mla
        return f"multi-head latent (query rank {m.q_rank}, key/value rank {m.kv_rank}, rotary {m.rope})"
    parts = [f"grouped-query ({a.base.num_heads} heads of {head_width(a)}, {a.base.num_kv_heads} key/value)"]
    if a.sliding_window:
        parts.append(f"sliding window {a.sliding_window} in the even layers")
    if a.sinks:
        parts.append("attention sinks")
    if a.attention_bias:
        parts.append("biases")
    return ", ".join(parts)


def configure(case: Case) -> MoeConfig:
    """The architecture at the case's family parameters (PARAM_NAMES), checked: a shape the decoder cannot take is
    a SpecError. A member's own parameters (cases/moe_mlperf.py) are applied by its `derive` on top."""
    v = {n: case.param(n) for n in PARAM_NAMES}
    a = moe_arch(case)
    hidden, heads, kv = v["hidden"], v["heads"], v["kv_heads"]
    per_head = a.mla is None and not a.head_dim  # the head width is hidden / heads
    if (per_head and hidden % heads) or heads % kv or (per_head and (hidden // heads) % 2):
        raise SpecError(
            f"case {case.name}: hidden ({hidden}) must be a multiple of heads ({heads}), heads of kv_heads ({kv}), "
            "and the head width even"
        )
    if v["top_k"] > v["experts"]:
        raise SpecError(f"case {case.name}: top_k ({v['top_k']}) is above the expert count ({v['experts']})")
    base = dataclasses.replace(
        a.base,
        vocab_size=v["vocab"],
        hidden_size=hidden,
        num_layers=v["layers"],
        num_heads=heads,
        num_kv_heads=kv,
        ffn_size=a.base.ffn_size if a.dense_layers else v["expert_ffn"],
        max_positions=v["seq"],
        tied_embeddings=bool(v["tied"]),
    )
    return dataclasses.replace(
        a,
        base=base,
        num_experts=v["experts"],
        top_k=v["top_k"],
        expert_ffn=v["expert_ffn"],
        shared_experts=v["shared_experts"],
        capacity_factor=v["capacity"] / 100.0,
        gating=GATINGS[v["gate"]],
    )


def shaped(case: Case, arch: MoeConfig | None = None, aux_weight: float | None = None) -> Case:
    """The member at its parameters: architecture (`configure`'s, or `arch` where a member configured it
    further), parameter count, input and, where given, its auxiliary loss's weight."""
    arch = arch or configure(case)
    loss = case.loss if aux_weight is None else dataclasses.replace(case.loss, aux_weight=aux_weight)
    return dataclasses.replace(
        case,
        arch=arch,
        param_count=param_count(arch),
        input=TextInput(seq_len=arch.base.max_positions, vocab=arch.base.vocab_size),
        loss=loss,
    )


def family_params(a: MoeConfig) -> tuple[CaseParam, ...]:
    """The family's parameters with this member's shape as their defaults."""
    b = a.base
    return (
        CaseParam("hidden", b.hidden_size, "width of the decoder (Mixtral 8x7B: 4096)"),
        CaseParam("layers", b.num_layers, "decoder layers (32)"),
        CaseParam("heads", b.num_heads, "query heads; hidden must be a multiple (32)"),
        CaseParam("kv_heads", b.num_kv_heads, "key/value heads; divides heads (8)"),
        CaseParam("vocab", b.vocab_size, "vocabulary size (32000)"),
        CaseParam("seq", b.max_positions, "tokens per sequence (4096)"),
        CaseParam("tied", int(b.tied_embeddings), "1: the LM head is the token embedding, 0: its own", choices=(0, 1)),
        CaseParam("experts", a.num_experts, "routed experts per layer (8)"),
        CaseParam("top_k", a.top_k, "routed experts each token visits (2)"),
        CaseParam("expert_ffn", a.expert_ffn, "SwiGLU width of one expert (14336)"),
        CaseParam("shared_experts", a.shared_experts, "experts every token visits besides its top_k (0)", minimum=0),
        CaseParam(
            "capacity",
            round(a.capacity_factor * 100),
            "capacity factor in percent (125 = 1.25: an expert takes at most that share of an even split, the "
            "rest dropped); 0 = dropless",
            minimum=0,
        ),
        CaseParam(
            "gate", GATINGS.index(a.gating), "0: softmax gating (Mixtral), 1: sigmoid (DeepSeek-V3)", choices=(0, 1)
        ),
    )


# Mixtral's paper gives no recipe; Llama's AdamW (peak lr 3e-4, weight decay 0.1), as torchtitan's MoE configs use.


def _member(name: str, title: str, arch: MoeConfig, batch_fixed: int, batch_cpu: int, notes: str) -> Case:
    """Register one member of the family: its shape as parameter defaults, its exact count."""
    return decoder_member(
        name,
        title,
        arch,
        param_count(arch),
        Loss("causal_lm", aux_weight=AUX_LOSS_WEIGHT),
        shaped,
        batch_fixed=batch_fixed,
        batch_cpu=batch_cpu,
        params=family_params(arch),
        notes=notes,
    )


MIXTRAL_CASE = _member(
    "mixtral_8x7b",
    "Mixtral 8x7B",
    MIXTRAL_8X7B,
    1,
    1,
    "Mixtral 8x7B's shape (8 experts, top-2, softmax gating, untied head) at sequence 4096, dropless; "
    "--param reshapes it (experts, top_k, expert_ffn, shared_experts, capacity, gate and the llama ones).",
)
TINY = _member(
    "moe_tiny",
    "MoE tiny",
    MOE_TINY,
    8,
    8,
    "A small MoE for CPU tests: 8 experts of 128, top-2, over 1, 2 or 4 expert-parallel ranks.",
)


__all__ = [
    "AUX_LOSS_WEIGHT",
    "FLOP_CONVENTION",
    "GATINGS",
    "MIXTRAL_8X7B",
    "MOE_TINY",
    "OPTIMIZER",
    "PARAM_NAMES",
    "TINY",
    "active_matmul_params",
    "active_param_count",
    "attended_keys",
    "attention_kind",
    "attention_params",
    "configure",
    "expert_params",
    "family_params",
    "flops_per_sample",
    "head_width",
    "moe_arch",
    "param_count",
    "point_figures",
    "shaped",
]

register_forward_flops(MoeConfig, lambda case, input_size: flops_per_sample(case, input_size) / 3.0)
