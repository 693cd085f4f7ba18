"""The Llama family (#35): a Llama-3-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention,
tied or untied embeddings) with its shape as parameters, its registered members, and its model-FLOPs formula.
Framework-free.

Parameters of a decoder of width h, l layers, H query heads of width d = h / H, K key/value heads, an MLP f wide
and a vocabulary V: ``V h (x2 untied) + l (2 h + 2 h^2 + 2 h K d + 3 h f) + h``: the token embedding (and an
untied LM head); per layer two RMSNorm weights, the query and output projections (h x h each), the key and value
projections (h x K d each) and SwiGLU's gate, up and down matrices (h x f each); the final RMSNorm. No biases.

Model FLOPs of one sequence of s tokens (``FLOP_CONVENTION``): ``s (6 N + 6 l s H d)``. N is every parameter that
multiplies (all but the embedding look-up; a tied head counts once, as the output projection); the attention
scores and weighted values cost 4 s H d per token forward with a full mask, half of it under a causal mask
(MaxText's count since 2025; torchtitan and Megatron count the full square); backward = 2x forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dlbench.cases import Case, CaseParam, Optimizer, TextInput, lora, register
from dlbench.cases.arch import LlamaConfig, Loss, MoeConfig
from dlbench.cases.flops import register_forward_flops
from dlbench.spec import SpecError

FLOP_CONVENTION = "6N + 6 l s H d per token (causal attention counted as half, as MaxText); N excludes the embedding"

# Shapes from the models' configuration files (Hugging Face meta-llama/Llama-3.1-8B and Llama-3.2-1B config.json).
LLAMA3_8B = LlamaConfig()  # 8,030,261,248 parameters
LLAMA3_1B = LlamaConfig(
    hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8, ffn_size=8192, tied_embeddings=True
)  # 1,235,814,400 parameters
# Llama 2 70B (Hugging Face meta-llama/Llama-2-70b-hf config.json: hidden 8192, 80 layers, 64 heads over 8 key/value
# heads, intermediate 28672, vocabulary 32000, rope_theta 10000, untied), at MLPerf's LoRA sequence of 8192.
LLAMA2_70B = LlamaConfig(
    vocab_size=32000,
    hidden_size=8192,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    ffn_size=28672,
    max_positions=8192,
    rope_theta=10000.0,
)  # 68,976,648,192 parameters
# A shape this CPU trains in seconds that still splits every way the layouts do: 8 heads over 4 key/value heads
# (tensor parallel up to 4), 4 layers (up to 4 pipeline stages), a sequence of 64 (sequence parallel up to 4).
LLAMA_TINY = LlamaConfig(
    vocab_size=1024, hidden_size=128, num_layers=4, num_heads=8, num_kv_heads=4, ffn_size=352, max_positions=64
)

PARAM_NAMES = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "seq", "tied")


def param_count(a: LlamaConfig) -> int:
    """Trainable parameters of a Llama decoder, from the formula in this module's docstring."""
    h, kv = a.hidden_size, a.num_kv_heads * a.head_dim
    layer = 2 * h + 2 * h * h + 2 * h * kv + 3 * h * a.ffn_size
    embeddings = a.vocab_size * h * (1 if a.tied_embeddings else 2)
    return embeddings + a.num_layers * layer + h


def matmul_params(a: LlamaConfig) -> int:
    """N of the 6N rule: every parameter but the embedding look-up (a tied head counts as the output projection)."""
    return param_count(a) - (0 if a.tied_embeddings else a.vocab_size * a.hidden_size)


def llama_arch(case: Case) -> LlamaConfig:
    """The case's decoder architecture (a Llama case's, at its parameters)."""
    if not isinstance(case.arch, LlamaConfig):
        raise TypeError(f"case {case.name} is not a Llama decoder")
    return case.arch


def flops_per_sample(
    case: Case, input_size: int | None = None, recompute: bool = False, full_model: bool = False
) -> float:
    """Training FLOPs of one sequence by FLOP_CONVENTION, or for a LoRA point by cases/lora.py's (frozen weights get
    no weight gradient; `full_model` counts it as if every weight trained); with `recompute` the FLOPs the devices
    execute (a second forward of every layer: 8N instead of 6N, the attention's 4/3 likewise)."""
    a = llama_arch(case)
    s = float(input_size or a.max_positions)
    adapters = lora.lora_of(case)
    if adapters is not None and not full_model:
        per_token = lora.lora_flops_per_token(a, adapters, matmul_params(a), s)
        return s * (per_token + (2.0 * matmul_params(a) if recompute else 0.0))  # a second forward of the base
    per_token = 6.0 * matmul_params(a) + 6.0 * a.num_layers * s * a.num_heads * a.head_dim
    return s * per_token * (4.0 / 3.0 if recompute else 1.0)


def _config(case: Case) -> LlamaConfig:
    """The architecture at the case's parameters, checked: a shape the decoder cannot take is a SpecError."""
    hidden, layers, heads, kv, ffn, vocab, seq, tied = (case.param(n) for n in PARAM_NAMES)
    if hidden % heads:
        raise SpecError(f"case {case.name}: hidden ({hidden}) must be a multiple of heads ({heads})")
    if heads % kv:
        raise SpecError(
            f"case {case.name}: heads ({heads}) must be a multiple of kv_heads ({kv}): each key/value "
            "head serves a whole group of query heads"
        )
    if (hidden // heads) % 2:
        raise SpecError(
            f"case {case.name}: the head width hidden / heads ({hidden // heads}) must be even: rotary "
            "embedding turns pairs of channels"
        )
    arch = llama_arch(case)
    return dataclasses.replace(
        arch,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        ffn_size=ffn,
        max_positions=seq,
        tied_embeddings=bool(tied),
    )


def _shaped(case: Case) -> Case:
    """The member at its parameters: architecture, parameter count and input; with LoRA (cases/lora.py) its
    trainable count is the adapters' and its optimizer MLPerf's LoRA recipe's."""
    arch = _config(case)
    shaped = dataclasses.replace(
        case,
        arch=arch,
        param_count=param_count(arch),
        input=TextInput(seq_len=arch.max_positions, vocab=arch.vocab_size),
    )
    return lora.with_lora(shaped, param_count(arch))


def _params(a: LlamaConfig) -> tuple[CaseParam, ...]:
    """The family's parameters with this member's shape as their defaults."""
    return (
        CaseParam("hidden", a.hidden_size, "width of the decoder (8B: 4096, 1B: 2048)"),
        CaseParam("layers", a.num_layers, "decoder layers (8B: 32, 1B: 16)"),
        CaseParam("heads", a.num_heads, "query heads; hidden must be a multiple (8B and 1B: 32)"),
        CaseParam("kv_heads", a.num_kv_heads, "key/value heads of grouped-query attention; divides heads (8)"),
        CaseParam("ffn", a.ffn_size, "SwiGLU width (8B: 14336, 1B: 8192)"),
        CaseParam("vocab", a.vocab_size, "vocabulary size (Llama 3: 128256)"),
        CaseParam("seq", a.max_positions, "tokens per sequence (Llama 3 pretraining: 8192)"),
        CaseParam(
            "tied",
            int(a.tied_embeddings),
            "1: the LM head is the token embedding (1B), 0: its own (8B)",
            choices=(0, 1),
        ),
        *lora.PARAMS,
    )


# Llama 3's pretraining recipe (Grattafiori et al. 2024, section 3.4.1): AdamW, peak lr 3e-4 (8B), weight decay 0.1.
OPTIMIZER = Optimizer("adamw", lr=3e-4, weight_decay=0.1)
Derive = Callable[[Case], Case]


def decoder_member(
    name: str, title: str, arch: LlamaConfig | MoeConfig, count: int, loss: Loss, derive: Derive, **kw: Any
) -> Case:
    """Register one member of a decoder family (Llama, and the MoE family built on it): a causal LM trained with
    AdamW, its shape as parameter defaults (`params`), its exact count; `kw` the rest of the Case's fields."""
    base = arch.base if isinstance(arch, MoeConfig) else arch
    return register(
        Case(
            name=name,
            title=title,
            task="causal_lm",
            input=TextInput(seq_len=base.max_positions, vocab=base.vocab_size),
            optimizer=OPTIMIZER,
            param_count=count,
            arch=arch,
            loss=loss,
            derive=derive,
            **kw,
        )
    )


def _member(name: str, title: str, arch: LlamaConfig, batch_fixed: int, batch_cpu: int, notes: str) -> Case:
    """Register one member of the family: its shape as parameter defaults, its exact count."""
    return decoder_member(
        name,
        title,
        arch,
        param_count(arch),
        Loss("causal_lm"),
        _shaped,
        batch_fixed=batch_fixed,
        batch_cpu=batch_cpu,
        params=_params(arch),
        notes=notes,
    )


FAMILY = _member(
    "llama",
    "Llama",
    LLAMA3_8B,
    1,
    1,
    "A Llama-3-style decoder of any shape (--param hidden=... layers=...), Llama 3.1 8B's by default; "
    "the layout is the point's (--fsdp, --tensor-parallel with sequence parallel, --pipeline-parallel).",
)
LLAMA3_8B_CASE = _member(
    "llama3_8b",
    "Llama 3.1 8B",
    LLAMA3_8B,
    1,
    1,
    "Llama 3.1 8B's shape (untied head), trained at sequence 8192 as torchtitan's recipe does; "
    "RoPE without 3.1's long-context frequency scaling (same FLOPs and parameters).",
)
LLAMA3_1B_CASE = _member(
    "llama3_1b",
    "Llama 3.2 1B",
    LLAMA3_1B,
    2,
    1,
    "Llama 3.2 1B's shape (head tied to the token embedding) at sequence 8192.",
)
LLAMA2_70B_CASE = _member(
    "llama2_70b",
    "Llama 2 70B",
    LLAMA2_70B,
    1,
    1,
    "Llama 2 70B's shape (untied head, rope_theta 1e4) at MLPerf's LoRA sequence 8192; MLPerf's fine-tuning "
    "benchmark is --lora 16 (alpha 32, dropout 0.1, fused qkv and o): 44,564,480 trainable.",
)
TINY = _member(
    "llama_tiny",
    "Llama tiny",
    LLAMA_TINY,
    8,
    8,
    "A 1M-parameter Llama for CPU tests of every layout (up to 4 tensor ranks or pipeline stages).",
)


__all__ = [
    "FAMILY",
    "FLOP_CONVENTION",
    "LLAMA2_70B",
    "LLAMA3_1B",
    "LLAMA3_8B",
    "LLAMA_TINY",
    "OPTIMIZER",
    "PARAM_NAMES",
    "TINY",
    "flops_per_sample",
    "llama_arch",
    "matmul_params",
    "param_count",
]

register_forward_flops(LlamaConfig, lambda case, input_size: flops_per_sample(case, input_size) / 3.0)
