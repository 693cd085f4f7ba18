"""GPT-2 small, DLPerf's special case (OneFlow-GPT against Megatron-LM): a causal decoder trained with AdamW on
next-token prediction at sequence 1024; its larger members by `size`; and the Megatron-LM FLOPs formula.
Framework-free.

Parameters of a GPT-2 decoder with tied embeddings (V vocabulary, P positions, l layers, width h):
``V h + P h + l (12 h^2 + 13 h) + 2 h``: token and position embeddings; per layer two layer norms (4h), the fused
query/key/value (3h^2 + 3h), the attention output (h^2 + h) and the 4x MLP (8h^2 + 5h); the final layer norm.
"""

from __future__ import annotations

import dataclasses

from dlbench.cases import Case, CaseParam, Optimizer, TextInput, UnknownCase, get_case, register
from dlbench.cases.arch import GptConfig, LlamaConfig, Loss, MoeConfig
from dlbench.cases.flops import register_forward_flops
from dlbench.spec import SpecError

# `size`: the member's nominal parameters in millions -> its shape (V 50257, 1024 learned positions, tied head).
# 350/760/1300 are the names Megatron-LM, DLPerf and GPT-3's Table 2.1 use (Medium, Large, XL); 774 and 1558 are
# GPT-2 large (36x1280x20) and XL (48x1600x25), whose counts do not match the 760M and 1.3B names.
SIZES: dict[int, GptConfig] = {
    124: GptConfig(),  # GPT-2 small 12x768x12: 124,439,808
    350: GptConfig(hidden_size=1024, num_layers=24, num_heads=16),  # GPT-2 medium: 354,823,168
    760: GptConfig(hidden_size=1536, num_layers=24, num_heads=16),  # GPT-3 Large: 758,727,168
    774: GptConfig(hidden_size=1280, num_layers=36, num_heads=20),  # GPT-2 large: 774,030,080
    1300: GptConfig(hidden_size=2048, num_layers=24, num_heads=16),  # GPT-3 XL (Megatron's 16 heads): 1,313,626,112
    1558: GptConfig(hidden_size=1600, num_layers=48, num_heads=25),  # GPT-2 XL: 1,557,611,200
}


def param_count(a: GptConfig) -> int:
    """Trainable parameters of a GPT-2 decoder, from the formula in this module's docstring."""
    h, ffn = a.hidden_size, a.mlp_ratio * a.hidden_size
    layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * ffn + ffn) + (ffn * h + h)
    head = 0 if a.tied_embeddings else a.vocab_size * h
    return a.vocab_size * h + a.max_positions * h + a.num_layers * layer + 2 * h + head


def _sized(case: Case) -> Case:
    """The case at its `size`: that member's architecture and parameter count."""
    arch = SIZES[case.param("size")]
    return dataclasses.replace(case, arch=arch, param_count=param_count(arch))


CASE = register(
    Case(
        name="gpt2_small",
        title="GPT-2 small",
        task="causal_lm",
        input=TextInput(seq_len=1024, vocab=50257),
        optimizer=Optimizer("adamw", lr=6e-4, weight_decay=0.1),
        param_count=124_439_808,
        batch_fixed=8,
        batch_cpu=1,
        arch=SIZES[124],
        loss=Loss("causal_lm"),
        aliases=("gpt2",),
        derive=_sized,
        params=(
            CaseParam(
                "size",
                124,
                "family member by parameters in millions: 124 (GPT-2 small), 350, 760, 1300 "
                "(Megatron/GPT-3 names), 774, 1558 (GPT-2 large, XL)",
                choices=tuple(SIZES),
            ),
        ),
        notes="Megatron-LM's GPT-2 recipe: lr 6e-4, weight decay 0.1 (on every parameter here), dropout 0.1.",
    )
)


# The family (#23): DLPerf's shapes as parameters, GPT-2 small's as defaults. One sequence fills the learned
# positions (Megatron's --max-position-embeddings = --seq-length, as DLPerf ran it).
FAMILY_DEFAULTS: dict[str, int] = {"hidden": 768, "layers": 12, "heads": 12, "seq": 1024, "vocab": 50257}
HEAD_SIZE = 64  # heads not given: hidden / 64 of them


def _shaped(case: Case) -> Case:
    """The family member at its parameters: hidden width, layers, heads, sequence (= positions) and vocabulary."""
    hidden, layers, heads, seq, vocab = (case.param(n) for n in FAMILY_DEFAULTS)
    if "heads" not in dict(case.values):  # not given: heads of 64, as GPT-2 has them (12 at width 768)
        heads = max(1, hidden // HEAD_SIZE)
    if hidden % heads:
        raise SpecError(f"case {case.name}: hidden ({hidden}) must be a multiple of heads ({heads}); set --param heads")
    arch = GptConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads, max_positions=seq)
    return dataclasses.replace(
        case, arch=arch, param_count=param_count(arch), input=TextInput(seq_len=seq, vocab=vocab)
    )


FAMILY = register(
    Case(
        name="gpt",
        title="GPT",
        task="causal_lm",
        input=TextInput(seq_len=1024, vocab=50257),
        optimizer=Optimizer("adamw", lr=6e-4, weight_decay=0.1),
        param_count=param_count(GptConfig()),
        batch_fixed=8,
        batch_cpu=1,
        arch=GptConfig(),
        loss=Loss("causal_lm"),
        derive=_shaped,
        params=(
            CaseParam("hidden", 768, "width of the decoder (DLPerf: 768, 1536, 2304, 3072)"),
            CaseParam("layers", 12, "decoder layers (DLPerf: 12, 16, 24, 32)"),
            CaseParam(
                "heads",
                12,
                "attention heads; hidden must be a multiple; not given: hidden / 64 (DLPerf: 12, 16, 24, 32)",
            ),
            CaseParam("seq", 1024, "tokens per sequence, = learned positions (DLPerf: 2048)"),
            CaseParam("vocab", 50257, "vocabulary size (DLPerf: 51200)"),
        ),
        notes="A GPT-2 decoder of any shape (DLPerf's GPT study: 117M to 3.5B), trained with Megatron-LM's GPT-2 "
        "recipe; the parallel layout is the point's (--tensor-parallel, --pipeline-parallel, --micro-batches, "
        "--recompute).",
    )
)


def gpt_arch(case: Case) -> GptConfig:
    """The case's decoder architecture (a GPT case's, at its configured size)."""
    if not isinstance(case.arch, GptConfig):
        raise TypeError(f"case {case.name} is not a GPT decoder")
    return case.arch


def sequence_length(case: Case, input_size: int | None = None) -> int:
    """Tokens per sample: the case's sequence, or `input_size`; longer than the learned positions is a SpecError."""
    seq = input_size or (case.input.seq_len if isinstance(case.input, TextInput) else 0)
    if isinstance(case.arch, LlamaConfig | MoeConfig):  # rotary positions: the case's context is the limit
        base = case.arch.base if isinstance(case.arch, MoeConfig) else case.arch
        limit, what = base.max_positions, "its seq parameter"
    else:
        limit, what = gpt_arch(case).max_positions, "its learned positions"
    if not 1 <= seq <= limit:
        raise SpecError(f"{case.name}: sequence length must be 1 to {limit} ({what}); got {seq}")
    return seq


def megatron_flops_per_sample(case: Case, input_size: int | None = None, recompute: bool = False) -> float:
    """Training FLOPs of one sequence by the Megatron-LM formula (Narayanan et al., SC'21, section 5.1).

    The paper's F per iteration of B sequences, with full activation recomputation (a second forward), is
    ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` (`recompute`: what the devices execute, the count DLPerf's
    figures use). Without recomputation (the model FLOPs MFU divides) the same count with backward = 2x forward:
    ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))`` (per layer 24 s h^2 + 4 s^2 h forward, plus the logits' 2 s h V,
    all x3). Divided by B here."""
    a, s = gpt_arch(case), float(sequence_length(case, input_size))
    n, h, v = float(a.num_layers), float(a.hidden_size), float(a.vocab_size)  # the paper's l, h, V
    if recompute:
        return 96.0 * s * n * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * n * h))
    return 72.0 * s * n * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * n * h))


def layout_flops_per_sample(case: Case, input_size: int | None, recompute: bool) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one sequence: the Megatron-LM count without recomputation (what MFU
    divides), and the FLOPs the devices execute, which add a second forward where activations are recomputed
    (the count DLPerf's and Megatron's TFLOP/s figures use)."""
    model = megatron_flops_per_sample(case, input_size)
    return model, megatron_flops_per_sample(case, input_size, recompute=True) if recompute else model


def hardware_ratio(model: str, params: dict[str, int], input_size: int | None) -> float:
    """Hardware over model FLOPs of a GPT or Llama point that recomputes activations (1.0 for any other case)."""
    try:
        case = get_case(model).configured(params)
        if isinstance(case.arch, LlamaConfig):
            return 4.0 / 3.0  # every layer's forward again: 8N over 6N (cases/llama.py)
        if not isinstance(case.arch, GptConfig):
            return 1.0
        model_flops, hardware = layout_flops_per_sample(case, input_size, recompute=True)
    except (UnknownCase, SpecError):
        return 1.0
    return hardware / model_flops


def flop_label(model: str, params: dict[str, int] | None = None) -> str:
    """The short name of the FLOP formula a causal-LM case's TFLOP/s use: 'Megatron' (GPT), '6N+attn/2' (Llama),
    '4N+6Na+attn/2' (a Llama with LoRA, cases/lora.py), '6Nact+attn/2' (a MoE: active parameters, cases/moe.py)."""
    try:
        case = get_case(model)
        arch = case.arch
        if isinstance(arch, MoeConfig):
            return "6Nact+attn/2"
        if isinstance(arch, LlamaConfig) and params and params.get("lora"):
            return "4N+6Na+attn/2"
        return "6N+attn/2" if isinstance(arch, LlamaConfig) else "Megatron"
    except UnknownCase:
        return "Megatron"


def tokens_per_sample(model: str, input_size: int | None = None, params: dict[str, int] | None = None) -> int | None:
    """Tokens one sample of a causal-LM case holds (its sequence length, or its `seq` parameter); None for any
    other case or name."""
    try:
        case = get_case(model)
    except UnknownCase:
        return None
    if case.task != "causal_lm" or not isinstance(case.input, TextInput):
        return None
    return input_size or (seq if (seq := dict(params or {}).get("seq")) else case.input.seq_len)


def lm_rates(
    model: str, params: dict[str, int], input_size: int | None, samples_per_s: float
) -> tuple[float, float] | None:
    """(tokens/s, achieved TFLOP/s by its family's formula: Megatron-LM's for GPT) of a causal-LM point at this
    samples/s; None for any other case, or a point its case can no longer configure."""
    tokens = tokens_per_sample(model, input_size, params)
    if tokens is None:
        return None
    try:  # GPT: the Megatron-LM formula; another decoder (Llama): its own case's count (cases/flops.py)
        case = get_case(model).configured(params)
        flops = case.train_flops_per_sample(input_size)
    except SpecError:
        return None
    return samples_per_s * tokens, samples_per_s * flops / 1e12


__all__ = [
    "CASE",
    "FAMILY",
    "FAMILY_DEFAULTS",
    "SIZES",
    "GptConfig",
    "flop_label",
    "gpt_arch",
    "hardware_ratio",
    "layout_flops_per_sample",
    "lm_rates",
    "megatron_flops_per_sample",
    "param_count",
    "sequence_length",
    "tokens_per_sample",
]


# The case's model-FLOPs count is the Megatron-LM formula without recomputation (3x the forward pass); torch's
# FlopCounterMode gives the same figure (tests/unit/cases/test_gpt.py).
register_forward_flops(GptConfig, lambda case, input_size: megatron_flops_per_sample(case, input_size) / 3.0)
