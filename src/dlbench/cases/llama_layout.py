"""What layouts the Llama family (#35) cannot take, framework-free, in ONE function: `llama_layout_refusal`.

It answers for every case, so that the one place that decides refusals can call it for any point: `--fsdp` and
`--context-parallel` are the family's options (another case is refused there), and a Llama shape must split as
the layout asks (heads and key/value heads over tensor ranks, the sequence over sequence-parallel ranks, layers
over pipeline stages).
"""

from __future__ import annotations

from dlbench.cases import get_case
from dlbench.cases.arch import DitConfig, LlamaConfig
from dlbench.spec import PointSpec

FSDP_FRAMEWORKS: tuple[str, ...] = ("torch", "jax")  # torch's FSDP2; JAX's fsdp axis of its (data, fsdp, tensor) mesh
LAYOUT_FRAMEWORKS = FSDP_FRAMEWORKS  # where a llama also splits over tensor (both) and pipeline (torch) ranks
JAX_NO_PIPELINE = (
    "JAX has no pipeline-parallel schedule in its public API: dlbench's JAX backend splits a llama over a (data, "
    "fsdp, tensor) mesh (--fsdp, --tensor-parallel); use --pipeline-parallel 1"
)
# Paddle 3.3.1's fleet hybrid parallel on the CPU (gloo), found by running it (docs/llm.md, #46): its layers and its
# pipeline schedule call the process group's *_on_calc_stream collectives, which ProcessGroupGLOO leaves unimplemented.
PADDLE_TP_ON_CPU = (
    "Paddle's fleet tensor parallel cannot run on the CPU: ColumnParallelLinear, RowParallelLinear and "
    "VocabParallelEmbedding call all_reduce_on_calc_stream, which ProcessGroupGLOO does not implement; "
    "use --strategy sharding or fleet"
)
PADDLE_PP_ON_CPU = (
    "Paddle's fleet pipeline parallel cannot run on the CPU: PipelineLayer reads a GPU id (ParallelEnv.device_id) "
    "and its schedule calls send/recv_on_calc_stream, which ProcessGroupGLOO does not implement; "
    "use --strategy sharding or fleet"
)
PADDLE_SPLIT_ON_GPU = (
    "Paddle's fleet tensor and pipeline parallel (NCCL) are not wired in dlbench yet: use --strategy sharding or fleet"
)
PADDLE_FSDP = (
    "--fsdp is not wired for paddle (Paddle's stage 3, group_sharded_parallel, asserts a GPU, XPU or custom "
    "device): --strategy sharding shards the optimizer state over the ranks (ZeRO stage 1)"
)
CP_CUDA_ONLY = (
    "--context-parallel needs CUDA attention kernels (torch's context parallel runs ring attention "
    "over the flash, memory-efficient and cuDNN kernels only): GPU only, not on the CPU"
)


def _shape_refusal(a: LlamaConfig, tensor: int, pipeline: int, seq: int | None) -> str | None:
    """Why this shape does not split over `tensor` ranks and `pipeline` stages (one line), or None; `seq`: the
    tokens of a sequence that sequence parallel splits over the tensor ranks (None: no sequence parallel)."""
    if a.num_heads % tensor:
        return f"{a.num_heads} query heads do not split over {tensor} tensor-parallel ranks"
    if a.num_kv_heads % tensor:
        return (
            f"{a.num_kv_heads} key/value heads do not split over {tensor} tensor-parallel ranks (each rank "
            "keeps whole groups of grouped-query attention)"
        )
    if a.ffn_size % tensor:
        return f"the SwiGLU's {a.ffn_size} units do not split over {tensor} tensor-parallel ranks"
    if a.vocab_size % tensor:
        return f"a vocabulary of {a.vocab_size} does not split evenly over {tensor} tensor-parallel ranks"
    if seq is not None and seq % tensor:
        return f"sequence parallel splits the {seq} tokens of a sequence over {tensor} ranks: it does not divide"
    if a.num_layers % pipeline:
        return f"{a.num_layers} layers do not split into {pipeline} equal pipeline stages"
    return None


def llama_layout_refusal(spec: PointSpec) -> str | None:
    """Why the point's layout cannot run (one line), or None: the Llama options on another case, FSDP without
    data-parallel ranks, context parallel off a GPU, a strategy beside FSDP, a shape that does not split."""
    case = get_case(spec.model).configured(spec.params)
    if spec.layout.context_parallel > 1:
        if spec.device != "cuda":
            return CP_CUDA_ONLY
        return (
            "--context-parallel is not wired in dlbench yet (torch.distributed.tensor.experimental."
            "context_parallel on a cp mesh dimension): leave it at 1"
        )
    llama = isinstance(case.arch, LlamaConfig)
    if spec.layout.fsdp and not llama and not isinstance(case.arch, DitConfig):  # a DiT's: cases/dit_layout.py
        return (
            f"--fsdp is wired for the llama and DiT cases only, not {case.name}: use --strategy ddp or a split layout"
        )
    if spec.framework == "paddle" and llama:
        return _paddle_refusal(spec)
    if spec.layout.fsdp and spec.framework not in FSDP_FRAMEWORKS:
        return f"--fsdp is wired for {' and '.join(FSDP_FRAMEWORKS)} only, not {spec.framework}"
    if spec.layout.fsdp and spec.layout.data == 1:
        return (
            f"--fsdp shards over the data-parallel ranks and this layout has one ({spec.world_size} device(s) "
            "/ tensor x pipeline): use more devices"
        )
    if not llama or not (spec.layout.fsdp or spec.layout.splits_model):
        return None
    if spec.framework not in LAYOUT_FRAMEWORKS:
        return f"a llama's layouts (--tensor-parallel, --pipeline-parallel) are wired for torch and JAX only, not {spec.framework}"
    assert isinstance(case.arch, LlamaConfig)
    lay = spec.layout
    if spec.framework == "jax":
        return _jax_refusal(spec, case.arch)
    if spec.strategy != "none":
        return (
            "FSDP2 keeps a llama point's data-parallel replicas in step (--fsdp, or with a split layout): "
            "leave --strategy at none"
        )
    if spec.compile:
        return "torch.compile of a sharded or split llama is not wired: drop --compile"
    return _shape_refusal(
        case.arch, lay.tensor_parallel, lay.pipeline_parallel, spec.input_size or case.arch.max_positions
    )


def _paddle_refusal(spec: PointSpec) -> str | None:
    """Why Paddle's fleet cannot hold this llama layout (one line), or None: its data parallel and sharding run;
    its stage 3, tensor and pipeline parallel do not on the CPU (gloo), and are not wired on GPUs."""
    if spec.layout.fsdp:
        return PADDLE_FSDP
    if not spec.layout.splits_model:
        return None
    if spec.device == "cuda":
        return PADDLE_SPLIT_ON_GPU
    return PADDLE_TP_ON_CPU if spec.layout.tensor_parallel > 1 else PADDLE_PP_ON_CPU


def _jax_refusal(spec: PointSpec, a: LlamaConfig) -> str | None:
    """Why JAX's (data, fsdp, tensor) mesh cannot hold this point (one line), or None: no pipeline, a strategy
    other than the mesh's own sharding, or a dimension that does not split evenly (JAX shards evenly)."""
    lay = spec.layout
    if lay.pipeline_parallel > 1:
        return JAX_NO_PIPELINE
    if spec.strategy not in ("none", "sharding"):
        return "a llama's JAX mesh shards the batch itself: leave --strategy at none (or sharding)"
    reason = _shape_refusal(a, lay.tensor_parallel, 1, None)  # whole heads and groups per tensor rank, as torch's
    if reason is None and spec.layout.fsdp and a.hidden_size % lay.data:
        reason = f"--fsdp shards each kernel's {a.hidden_size} hidden units over {lay.data} ranks: they do not divide"
    return reason


__all__ = [
    "CP_CUDA_ONLY",
    "FSDP_FRAMEWORKS",
    "JAX_NO_PIPELINE",
    "LAYOUT_FRAMEWORKS",
    "PADDLE_FSDP",
    "PADDLE_PP_ON_CPU",
    "PADDLE_SPLIT_ON_GPU",
    "PADDLE_TP_ON_CPU",
    "llama_layout_refusal",
]
