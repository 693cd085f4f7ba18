"""LoRA fine-tuning of the Llama family (#47): which matrices get low-rank adapters, their exact trainable count,
the frozen count beside it, and the FLOPs a LoRA step executes. Framework-free.

A point asks for LoRA with the family's parameters (``--lora RANK`` is ``--param lora=RANK``): `lora` the rank r
(0: no LoRA, the whole model trains), `lora_alpha` (the update is scaled by alpha / r), `lora_dropout` in percent
(dropout on the adapters' input) and `lora_targets`, one of TARGETS:

- 0 ``qkv,o``: one adapter on the fused query-key-value projection and one on the output projection, MLPerf's
  reference (mlcommons/training llama2_70b_lora: a fused-QKV Llama 2 70B, ``--lora_target_modules
  qkv_proj,o_proj``, r 16, alpha 32, dropout 0.1, sequence 8192); a fused adapter has ONE down-projection
  (h -> r) and one up-projection (r -> h + 2 K d) whose output is split over q, k and v;
- 1 ``q,v``: the query and value projections (Hu et al. 2021);
- 2 ``qkv,o,mlp``: the fused QKV, the output projection and SwiGLU's three matrices (every linear of a block).

Trainable parameters: per layer, for every adapted matrix of shape in x out, ``r (in + out)`` (A is r x in, B is
out x r, no biases); the base model's every parameter is frozen (the embedding, the norms and the head included).

FLOPs of one sequence of s tokens (``FLOP_CONVENTION``): ``s (4 N + 6 N_a + 6 l s H d)``. The forward pass costs
2 N + 2 N_a per token (N: the base's matrices as cases/llama.py counts them, N_a: the adapters'); the backward pass
computes every frozen matrix's input gradient (2 N) and only the adapters' weight gradients (2 N_a + 2 N_a with
their input gradients): a frozen weight needs no weight gradient, which saves a third of 6N. The first layer's
input gradient, which nothing needs, is counted (under 1/l of the total). Attention's scores and weighted values
are the Llama family's (causal, counted as half). Beside it every LoRA point records the full-model count
``s (6 N + 6 l s H d)`` (the Llama family's model FLOPs, as if every weight trained), so that MFU is given both ways.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dlbench.capabilities import Capabilities
from dlbench.cases import Case, CaseParam, Optimizer
from dlbench.cases.arch import LlamaConfig
from dlbench.spec import PointSpec, SpecError

TARGETS: tuple[tuple[str, ...], ...] = (("qkv", "o"), ("q", "v"), ("qkv", "o", "mlp"))
FLOP_CONVENTION = (
    "4N + 6 N_adapters + 6 l s H d per token: frozen weights get input gradients only (no weight gradient); "
    "causal attention counted as half, as MaxText; N excludes the embedding"
)
# --converge of a LoRA point (docs/lora.md): a base dlbench pretrains on the Markov source (PRETRAIN_STEPS full
# steps of PRETRAIN_BATCH sequences at the family's AdamW, PRETRAIN_LR, from seed 0; cached per framework and shape),
# fine-tuned on the same chain with SHIFTED_ROWS of its 64 rows drawn afresh, to its entropy rate + FINETUNE_MARGIN.
PRETRAIN_STEPS = 400
PRETRAIN_BATCH = 8
PRETRAIN_LR = 3e-3
SHIFTED_ROWS = 16
FINETUNE_MARGIN = 0.40
# MLPerf's reference optimizer for LoRA (run_llama_70B_scrolls_r16.sh): AdamW, lr 4e-4, weight decay 1e-4 (its
# cosine schedule and gradient clipping at 0.3 are not applied: dlbench measures steps at a constant rate).
OPTIMIZER = Optimizer("adamw", lr=4e-4, weight_decay=1e-4)
MLPERF_MODEL = "llama2_70b"
# Every other member fine-tunes at 10x MLPerf's rate: llama_tiny's r 8 adapters reached its --converge target in
# about 100 steps at 4e-3 and about 375 at 4e-4 (measured here, sequence 32, batch 8), past a CPU suite's budget.
SMALL_OPTIMIZER = Optimizer("adamw", lr=4e-3, weight_decay=1e-4)


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters: rank, alpha (update scaled by alpha / rank), dropout on their input, adapted matrices."""

    rank: int
    alpha: int = 32
    dropout: float = 0.1
    targets: tuple[str, ...] = ("qkv", "o")

    @property
    def scale(self) -> float:
        """alpha / rank, the factor on every adapter's output."""
        return self.alpha / self.rank

    def describe(self) -> str:
        """One line: 'r 16, alpha 32, dropout 0.1 on qkv (fused), o'."""
        names = ", ".join(
            "qkv (fused)" if t == "qkv" else "mlp (w1, w2, w3)" if t == "mlp" else t for t in self.targets
        )
        return f"r {self.rank}, alpha {self.alpha}, dropout {self.dropout:g} on {names}"


MLPERF = LoraConfig(rank=16, alpha=32, dropout=0.1, targets=("qkv", "o"))

PARAMS: tuple[CaseParam, ...] = (
    CaseParam("lora", 0, "LoRA rank (--lora): 0 trains the whole model; > 0 freezes it and trains adapters", minimum=0),
    CaseParam("lora_alpha", 32, "LoRA alpha: adapters' output scaled by alpha / rank (MLPerf: 32)"),
    CaseParam("lora_dropout", 10, "dropout on the adapters' input, in percent (MLPerf: 10)", minimum=0),
    CaseParam(
        "lora_targets",
        0,
        "0: fused qkv and o (MLPerf), 1: q and v (Hu et al.), 2: qkv, o and the SwiGLU matrices",
        choices=(0, 1, 2),
    ),
)


def lora_of(case: Case) -> LoraConfig | None:
    """The point's LoRA (None where it trains the whole model, or the case has no LoRA parameters)."""
    declared = {p.name for p in case.params}
    if "lora" not in declared or case.param("lora") == 0:
        return None
    dropout = case.param("lora_dropout")
    if dropout >= 100:
        raise SpecError(f"case {case.name}: lora_dropout is a percentage below 100; got {dropout}")
    return LoraConfig(
        case.param("lora"), case.param("lora_alpha"), dropout / 100.0, TARGETS[case.param("lora_targets")]
    )


def adapted_shapes(a: LlamaConfig, lora: LoraConfig) -> list[tuple[int, int]]:
    """(in, out) of every matrix of one layer that gets an adapter (a fused QKV counts as one)."""
    h, kv, f = a.hidden_size, a.num_kv_heads * a.head_dim, a.ffn_size
    shapes = {
        "qkv": [(h, h + 2 * kv)],
        "q": [(h, h)],
        "k": [(h, kv)],
        "v": [(h, kv)],
        "o": [(h, h)],
        "mlp": [(h, f), (f, h), (h, f)],
    }
    return [s for t in lora.targets for s in shapes[t]]


def adapter_params(a: LlamaConfig, lora: LoraConfig) -> int:
    """The adapters' (trainable) parameters: r (in + out) per adapted matrix, per layer."""
    return a.num_layers * sum(lora.rank * (fan_in + fan_out) for fan_in, fan_out in adapted_shapes(a, lora))


def lora_flops_per_token(a: LlamaConfig, lora: LoraConfig, base_matmul_params: int, seq: float) -> float:
    """Training FLOPs of one token of a LoRA step by FLOP_CONVENTION."""
    return (
        4.0 * base_matmul_params + 6.0 * adapter_params(a, lora) + 6.0 * a.num_layers * seq * a.num_heads * a.head_dim
    )


def with_lora(case: Case, base_count: int) -> Case:
    """The case with LoRA applied, where the point asks for it: its trainable count the adapters', MLPerf's LoRA
    optimizer (llama2_70b; the other members at 10x its rate, SMALL_OPTIMIZER); unchanged without LoRA."""
    lora = lora_of(case)
    if lora is None or not isinstance(case.arch, LlamaConfig):
        return case
    optimizer = OPTIMIZER if case.name == MLPERF_MODEL else SMALL_OPTIMIZER
    return dataclasses.replace(case, param_count=adapter_params(case.arch, lora), optimizer=optimizer)


def figures(case: Case, base_count: int, model_flops: float, lora_flops: float) -> dict[str, object]:
    """What a LoRA point records: the adapters, its trainable and frozen counts, and its FLOPs of one sequence by
    both conventions, each named."""
    lora = lora_of(case)
    assert lora is not None and isinstance(case.arch, LlamaConfig)
    return {
        "rank": lora.rank,
        "alpha": lora.alpha,
        "dropout": lora.dropout,
        "targets": list(lora.targets),
        "adapters": lora.describe(),
        "params_trainable": adapter_params(case.arch, lora),
        "params_frozen": base_count,
        "flops_per_sample": {"lora": lora_flops, "full_model": model_flops, "convention": FLOP_CONVENTION},
    }


__all__ = [
    "FLOP_CONVENTION",
    "MLPERF",
    "OPTIMIZER",
    "PARAMS",
    "SMALL_OPTIMIZER",
    "TARGETS",
    "LoraConfig",
    "adapted_shapes",
    "adapter_params",
    "base_key",
    "figures",
    "lora_flops_per_token",
    "lora_of",
    "lora_refusal",
    "with_lora",
]


def base_key(case: Case, framework: str, input_size: int | None) -> str:
    """The name of a LoRA case's pretrained base in the cache: the framework, the base shape, the sequence it was
    pretrained at and the recipe."""
    import hashlib

    recipe = f"{case.arch!r} {input_size} {PRETRAIN_STEPS} {PRETRAIN_BATCH} {PRETRAIN_LR}"
    return f"{framework}-{hashlib.sha256(recipe.encode()).hexdigest()[:16]}"


def lora_refusal(spec: PointSpec, caps: Capabilities) -> str | None:
    """Why a LoRA point cannot run (one line), or None: a framework without LoRA wired, a split layout (tensor or
    pipeline parallel), FSDP where the framework's mesh does not shard adapters, fp8."""
    if ("lora", 0) in spec.case_params or not any(k == "lora" for k, _ in spec.case_params):
        return None
    if not caps.lora:
        return f"--lora is wired for torch and JAX only, not {spec.framework}"
    if spec.layout.splits_model:
        return (
            "--lora with tensor or pipeline parallel is not wired (the adapters would need their own split): use one "
            "device, data parallel, or --fsdp"
        )
    if spec.layout.fsdp and not caps.lora_fsdp:
        return f"--lora with --fsdp is wired for torch only (FSDP2 over the frozen base), not {spec.framework}"
    if spec.precision == "fp8":
        return "--lora with fp8 is not wired (float8 linears under frozen weights and adapters): use bf16"
    return None
