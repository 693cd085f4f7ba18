"""A point's peak memory per device, estimated before anything is allocated (#41). Framework-free.

The estimate adds what a training step holds at its peak, on the device that holds most:

- **model state**: the case's exact parameter count (its configured `param_count`) in fp32 master weights (every
  precision keeps them: dlbench.numerics), one fp32 gradient each, and the optimizer's states (SGD with momentum
  one, Adam and AdamW two, Adagrad one; none for a sparse table's gradient, and a LoRA point's frozen base holds
  weights only); under autocast (amp, bf16, fp8) one 2-byte copy of each weight. The layout shares it
  out: tensor and pipeline parallel split the model, expert parallel the experts, a model-parallel face
  classifier its classes, and FSDP shards what each replica holds over the data-parallel ranks (plus two layers
  gathered whole at a time);
- **activations** per sample, from the architecture: for CNNs the elements every convolution and dense layer
  produces (cases/flops.py walks the shapes) times the tensors a layer keeps for the backward pass (two with batch
  norm, one without); for decoders and BERT the tensors per token and layer, as Korthikanti et al. (2022) count
  them, plus the attention scores where the kernel materialises them (on the CPU with dropout or a padding mask:
  torch's fused CPU kernel takes neither) and the logits over the vocabulary; split by tensor and context
  parallel, the pipeline's micro-batches in flight, and recomputation; ArcFace's normalised copy of its classifier
  (and that copy's gradient) for the face case;
- **the optimizer's step**: torch's multi-tensor Adam makes a parameter-sized temporary (SGD too, with weight
  decay), held after the activations are freed, so the peak takes the larger of the two;
- **the runtime**: the framework and the worker before any model (on the CPU, measured: torch about 360 MiB, JAX
  600 MiB, TF 970 MiB; JAX also keeps about 1.6 times torch's activations), or a GPU's CUDA context.

docs/memory.md compares it with measured CPU peaks (dlbench's own stored peak resident set): every case that fits
the 24 GiB test machine is within MARGIN of its measurement. A point whose estimate is above MARGIN x the memory it
would get is refused before anything starts (launch/fits.py), unless --force.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.cases import Case, CtrInput, ImageInput, LatentInput, TextInput, dlrm, get_case, llama, lora
from dlbench.cases.arch import (
    AlexNetArch,
    BertConfig,
    DitConfig,
    DlrmArch,
    FaceArch,
    GptConfig,
    InceptionArch,
    LlamaConfig,
    MoeConfig,
    ResNetArch,
    VggArch,
    WideDeepArch,
)
from dlbench.cases.flops import layer_outputs, masked_predictions, resnet_outputs
from dlbench.spec import PointSpec

ESTIMATE_KEY = "memory_estimate"  # where a stored point keeps its estimate (extra)
MARGIN = 1.5  # the estimate is within this factor of the measured peak; a refusal needs estimate > MARGIN x limit
GIB = 2**30
WEIGHT_BYTES = 4  # fp32 master weights, in every precision
GRADIENT_BYTES = 4
AUTOCAST_COPY_BYTES = 2  # the low-precision copy of each weight autocast casts for the forward pass
CUDA_CONTEXT_BYTES = 768 * 2**20  # on a GPU: the CUDA context and the framework's kernels, before any model


@dataclass(frozen=True)
class FrameworkMemory:
    """What a framework adds on the CPU, measured (benchmarks/memory.py): its process before any model, and how many
    times torch's activations it keeps (XLA's buffers under JAX: about 1.6)."""

    runtime: int
    activations: float = 1.0


# torch from 20 configurations of every case that fits here; jax and tf from 6 and 4 (fitted on those points):
# docs/memory.md. Another framework is taken as torch.
FRAMEWORKS: dict[str, FrameworkMemory] = {
    "torch": FrameworkMemory(360 * 2**20),
    "jax": FrameworkMemory(600 * 2**20, 1.6),
    "tf": FrameworkMemory(970 * 2**20),
}
SIMULATED = ("fake",)  # backends that allocate no model: no estimate
# Tensors a layer keeps for its backward pass, per element it produces: conv + batch norm + ReLU keeps the
# convolution's output and the normalised one; conv + ReLU (in place) only the output.
KEPT_WITH_NORM = 2.0
KEPT_WITHOUT_NORM = 1.0
# Per token and layer of a transformer, in activation elements (Korthikanti et al. 2022, table 2, at 4 bytes):
# BERT's and GPT-2's 34 s b h bytes at 2 bytes an element (q, k, v, the context, two norms' inputs and outputs,
# the MLP's 4h input and output, dropout masks); Llama's SwiGLU block keeps its norms' inputs and outputs, q, k, v
# before and after the rotation, the attention output and the MLP's four f-wide tensors.
TRANSFORMER_KEPT = 17.0
LLAMA_KEPT_H, LLAMA_KEPT_KV, LLAMA_KEPT_F = 10.0, 4.0, 4.0
# a DiT block per token, in hidden widths: fitted (docs/memory.md), twice a GPT layer's (TRANSFORMER_KEPT); the
# modulated norms, normalised QK and rotary copies keep about as much again
DIT_KEPT = 34.0
ATTENTION_KEPT = 2.5  # materialised scores: softmax output, dropout output and mask, per head and key
LOGITS_KEPT = 3.0  # the logits over the vocabulary, their log-softmax and its gradient


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device holds at a point's peak, by what holds them; `sharding` says how the model state is split."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    step_temporary: int
    runtime: int
    sharding: str = ""

    @property
    def total(self) -> int:
        """The estimated peak on one device (the activations and the optimizer's temporary are not held at once)."""
        held = self.weights + self.gradients + self.optimizer + self.runtime
        return held + max(self.activations, self.step_temporary)

    @property
    def model_state(self) -> int:
        """Weights, gradients and optimizer states: the analytic part, exact from the parameter count."""
        return self.weights + self.gradients + self.optimizer

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict, kept with the point (extra["memory_estimate"])."""
        return {
            "total_bytes": self.total,
            "weights_bytes": self.weights,
            "gradients_bytes": self.gradients,
            "optimizer_bytes": self.optimizer,
            "activations_bytes": self.activations,
            "step_temporary_bytes": self.step_temporary,
            "runtime_bytes": self.runtime,
            "sharding": self.sharding,
            "margin": MARGIN,
        }

    def describe(self) -> str:
        """'29.4 GiB per device (weights, gradients and optimizer states 19.3 GiB sharded (fsdp over 8); activations
        9.43 GiB; runtime 0.75 GiB)'."""
        shard = f" {self.sharding}" if self.sharding else ""
        return (
            f"{gib(self.total)} per device (weights, gradients and optimizer states {gib(self.model_state)}{shard}; "
            f"activations {gib(self.activations)}; runtime {gib(self.runtime)})"
        )


def gib(n: float) -> str:
    """Bytes as GiB, whole digits kept: '0.35 GiB', '12.3 GiB', '1,043 GiB'."""
    g = n / GIB
    return f"{g:,.2f} GiB" if g < 10 else f"{g:,.1f} GiB" if g < 1000 else f"{g:,.0f} GiB"


def estimate(spec: PointSpec) -> MemoryEstimate | None:
    """The point's estimated peak per device, or None where dlbench cannot say (a simulated backend, an
    architecture without a rule)."""
    if spec.framework in SIMULATED:
        return None
    case = get_case(spec.model).configured(spec.params)
    acts = _activations_per_sample(case, spec)
    if acts is None:
        return None
    params, gathered, sharding = _params_per_device(case, spec)
    share = params / case.param_count if case.param_count else 1.0  # the trained parameters this device holds
    states = _optimizer_states(case)
    sparse = _sparse_table(case) * share
    frozen = _frozen(case) * share
    low = spec.precision in ("amp", "bf16", "fp8")
    fw = FRAMEWORKS.get(spec.framework, FRAMEWORKS["torch"])
    act_bytes = (2.0 if low else 4.0) * fw.activations
    held = params + frozen
    weights = held * WEIGHT_BYTES + (held + gathered) * (AUTOCAST_COPY_BYTES if low else 0) + gathered * WEIGHT_BYTES
    return MemoryEstimate(
        weights=round(weights),
        gradients=round(max(params - sparse, 0) * GRADIENT_BYTES),
        optimizer=round(params * states * WEIGHT_BYTES),
        activations=round((acts * _samples_held(spec) + _per_step(case, spec)) * act_bytes),
        step_temporary=round(params * WEIGHT_BYTES * _step_temporaries(case)),
        runtime=CUDA_CONTEXT_BYTES if spec.device == "cuda" else fw.runtime,
        sharding=sharding,
    )


def _optimizer_states(case: Case) -> int:
    opt = case.optimizer
    if opt.name in ("adam", "adamw"):
        return 2
    if opt.name == "adagrad":  # its sum of squared gradients
        return 1
    return 1 if opt.momentum else 0


def _step_temporaries(case: Case) -> float:
    """Parameter-sized temporaries of the optimizer's step (torch's foreach Adam: one; SGD: one with weight decay)."""
    opt = case.optimizer
    return 1.0 if opt.name in ("adam", "adamw") or opt.weight_decay else 0.0


def _sparse_table(case: Case) -> int:
    """Parameters whose gradient is sparse (Wide & Deep's tables with `sparse` 1, DLRM's tables): no dense gradient
    for them."""
    a = case.arch
    if isinstance(a, WideDeepArch) and case.param("sparse") == 1:
        return a.vocab * (1 + a.embedding)
    if isinstance(a, DlrmArch):
        return dlrm.embedding_params(a)
    return 0


def _frozen(case: Case) -> int:
    """Parameters a point holds but does not train: a LoRA point's base model (its count is the adapters')."""
    a = case.arch
    return llama.param_count(a) if isinstance(a, LlamaConfig) and lora.lora_of(case) is not None else 0


def _decoder_layer_params(a: LlamaConfig | GptConfig, num_layers: int, total: int) -> float:
    """Parameters of one decoder layer: the total less the embeddings, per layer."""
    embed = a.vocab_size * a.hidden_size * (1 if a.tied_embeddings else 2)
    return (total - embed) / max(num_layers, 1)


def _params_per_device(case: Case, spec: PointSpec) -> tuple[float, float, str]:
    """(parameters whose state one device holds, parameters FSDP gathers whole for a moment, how they were split)."""
    lay, world = spec.layout, spec.world_size
    a = case.arch
    split, parts = max(lay.tensor_parallel * lay.pipeline_parallel, 1), []
    experts = 0.0
    if isinstance(a, MoeConfig):
        experts = float(a.base.num_layers * a.num_experts * 3 * a.base.hidden_size * a.expert_ffn)
    classifier = float(a.embedding * a.classes) if isinstance(a, FaceArch) and a.model_parallel else 0.0
    if isinstance(a, DlrmArch) and a.table_wise:  # whole tables, dealt out over the ranks
        classifier = float(dlrm.embedding_params(a))
    ep = max(lay.expert_parallel, 1)
    held = (case.param_count - experts - classifier) / split + experts / (split * ep) + classifier / max(world, 1)
    parts += [f"tensor {lay.tensor_parallel}"] if lay.tensor_parallel > 1 else []
    parts += [f"pipeline {lay.pipeline_parallel}"] if lay.pipeline_parallel > 1 else []
    parts += [f"experts over {ep}"] if ep > 1 else []
    parts += [f"{'tables' if isinstance(a, DlrmArch) else 'classifier'} over {world}"] if classifier else []
    gathered = 0.0
    if lay.fsdp:
        held /= max(lay.data, 1)
        base = a.base if isinstance(a, MoeConfig) else a
        if isinstance(base, (LlamaConfig, GptConfig)):  # a layer gathered whole, the next one prefetched
            gathered = 2 * _decoder_layer_params(base, base.num_layers, case.param_count) / split
        parts.append(f"fsdp over {lay.data}")
    how = f"sharded ({', '.join(parts)})" if lay.fsdp else f"split ({', '.join(parts)})" if parts else ""
    return held, gathered, how


def _samples_held(spec: PointSpec) -> float:
    """Samples whose activations one device holds at once: its batch, or a pipeline stage's micro-batches in
    flight (1F1B: as many as stages; GPipe: all)."""
    lay = spec.layout
    if lay.pipeline_parallel <= 1:
        return float(spec.batch_size)
    micro = max(lay.micro_batches, 1)
    in_flight = micro if lay.schedule == "gpipe" else min(lay.pipeline_parallel, micro)
    return spec.batch_size / micro * in_flight


def _per_step(case: Case, spec: PointSpec) -> float:
    """Activation elements a step holds whatever its batch: ArcFace's normalised copy of its classifier shard, that
    copy's gradient and the normalisation's temporary (backends normalise the weight for each step)."""
    a = case.arch
    if isinstance(a, FaceArch):
        shard = a.classes // max(spec.world_size, 1) if a.model_parallel else a.classes
        return 3.0 * shard * a.embedding
    return 0.0


def _activations_per_sample(case: Case, spec: PointSpec) -> float | None:
    """Activation elements one sample keeps on one device, or None for an architecture without a rule."""
    a, inp, lay = case.arch, case.input, spec.layout
    size = spec.input_size
    if isinstance(a, (ResNetArch, InceptionArch)):
        return layer_outputs(case, size) * KEPT_WITH_NORM
    if isinstance(a, VggArch):
        return layer_outputs(case, size) * (KEPT_WITH_NORM if a.batch_norm else KEPT_WITHOUT_NORM)
    if isinstance(a, AlexNetArch):
        return layer_outputs(case, size) * KEPT_WITHOUT_NORM
    if isinstance(a, FaceArch):
        side = size or (inp.size if isinstance(inp, ImageInput) else 112)
        shard = a.classes // max(spec.world_size, 1) if a.model_parallel else a.classes
        return resnet_outputs(a.backbone, side, a.embedding) * KEPT_WITH_NORM + LOGITS_KEPT * shard
    if isinstance(a, WideDeepArch) and isinstance(inp, CtrInput):  # the gathered rows and the MLP's layers
        return 3.0 * (sum(a.hidden) + inp.categorical * a.embedding)
    if isinstance(a, DlrmArch):  # the pooled rows, both MLPs, the interaction and the cross layers' outputs; the
        # tables' sparse gradient holds a row per look-up, and the sparse update one copy more; int64 ids
        n, rows = dlrm.interaction_width(a), dlrm.lookups_per_sample(a)
        dense = 3.0 * (sum(a.bottom) + n + a.cross_layers * (n + a.low_rank) + sum(a.top))
        return dense + 2.0 * rows * a.embedding + 2.0 * rows
    if isinstance(a, DitConfig) and isinstance(inp, LatentInput):  # a layer per block, over the latent's patches
        # and the text tokens (double blocks: each stream its own layer; single: the joint sequence)
        tokens = ((size or a.latent_side) // a.patch) ** 2 + a.text_tokens
        blocks = a.double_blocks + a.single_blocks
        return tokens * blocks * DIT_KEPT * a.hidden_size / max(lay.tensor_parallel, 1)
    if not isinstance(inp, TextInput):
        return None
    seq = (size or inp.seq_len) / max(lay.context_parallel, 1)
    found = _text_model(a, seq, spec, inp)
    if found is None:
        return None
    stage_layers = found.layers / max(lay.pipeline_parallel, 1)
    if lay.recompute:  # each layer's input kept; one layer's whole activations rebuilt at a time
        kept = stage_layers * found.hidden + found.per_layer
    else:
        kept = stage_layers * found.per_layer
    return seq * kept / max(lay.tensor_parallel, 1) + LOGITS_KEPT * found.head_tokens * found.vocab / max(
        lay.tensor_parallel, 1
    )


@dataclass(frozen=True)
class _TextModel:
    """What a text model keeps: elements per token and layer, its layers, width and vocabulary, and the tokens its
    head scores over the vocabulary."""

    per_layer: float
    layers: int
    hidden: int
    vocab: int
    head_tokens: float


def _text_model(a: object, seq: float, spec: PointSpec, text: TextInput) -> _TextModel | None:
    """The activation rule of a text model's architecture, or None for one without a rule."""
    cpu = spec.device != "cuda"
    if isinstance(a, BertConfig):
        scores = ATTENTION_KEPT * a.num_heads * seq  # a padding mask: the math kernel everywhere
        predictions = float(masked_predictions(text, int(seq)))
        return _TextModel(
            TRANSFORMER_KEPT * a.hidden_size + scores, a.num_layers, a.hidden_size, a.vocab_size, predictions
        )
    if isinstance(a, GptConfig):
        scores = ATTENTION_KEPT * a.num_heads * seq if cpu and a.dropout > 0 else 0.0
        return _TextModel(TRANSFORMER_KEPT * a.hidden_size + scores, a.num_layers, a.hidden_size, a.vocab_size, seq)
    if isinstance(a, LlamaConfig):
        return _TextModel(_llama_layer(a, a.ffn_size), a.num_layers, a.hidden_size, a.vocab_size, seq)
    if isinstance(a, MoeConfig):
        b = a.base
        routed = (a.top_k + a.shared_experts) * (3 * b.hidden_size + LLAMA_KEPT_F * a.expert_ffn)
        per = _llama_layer(b, 0) + 2 * a.num_experts + routed
        return _TextModel(per, b.num_layers, b.hidden_size, b.vocab_size, seq)
    return None


def _llama_layer(a: LlamaConfig, ffn: int) -> float:
    kv = a.num_kv_heads * a.head_dim
    return LLAMA_KEPT_H * a.hidden_size + LLAMA_KEPT_KV * kv + LLAMA_KEPT_F * ffn


__all__ = ["ESTIMATE_KEY", "FRAMEWORKS", "GIB", "MARGIN", "FrameworkMemory", "MemoryEstimate", "estimate", "gib"]
