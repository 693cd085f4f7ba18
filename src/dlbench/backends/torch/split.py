"""A model split over devices (tensor and pipeline parallel, #23) in torch: the FLOPs a GPT point records, and
how such a point is built (what cannot split is refused from the capability table: dlbench.refusals). Light: the distributed machinery (gpt_parallel.py, the trainer in
pipeline.py) is imported only when a point splits its model.

- data parallel across replicas of a split model: FSDP2 (``fully_shard`` over the mesh's dp dimension, the
  parameters kept gathered between forward and backward), the native way to data-parallel DTensor shards; in bf16
  with an explicit ``MixedPrecisionPolicy`` (bf16 parameters, fp32 reduction, as torchtitan), recorded;
- pipeline: ``torch.distributed.pipelining``'s ``PipelineStage`` with the 1F1B or GPipe schedule over M
  micro-batches (pipeline.py);
- the loss: under ``loss_parallel`` where the vocabulary is split; the reported loss is the mean over the
  data-parallel replicas of the last stage's mean over micro-batches, the loss of the global batch.
"""

from __future__ import annotations

from typing import Any

import torch

from dlbench.backends.base import Trainer
from dlbench.backends.context import BuildContext
from dlbench.backends.torch import data
from dlbench.backends.torch.models import build_model
from dlbench.cases import Case, lora
from dlbench.cases.arch import LlamaConfig
from dlbench.cases.gpt import layout_flops_per_sample
from dlbench.cases.llama import FLOP_CONVENTION, param_count
from dlbench.cases.llama import flops_per_sample as llama_flops
from dlbench.numerics import Numerics
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

TITLES = {"1f1b": "1F1B", "gpipe": "GPipe"}
FLOPS_KEY = {False: "gpt_flops_per_sample", True: "llm_flops_per_sample"}  # the facts' key, by "is a Llama"


def flops_facts(spec: PointSpec, case: Case) -> dict[str, object]:
    """The FLOPs of one sequence recorded with a decoder point: model (MFU's) and hardware, and the convention
    that counted them (Megatron-LM's for GPT, cases/llama.py's for Llama)."""
    if isinstance(case.arch, LlamaConfig):
        model = llama_flops(case, spec.input_size)
        hardware = llama_flops(case, spec.input_size, recompute=True) if spec.layout.recompute else model
        convention = lora.FLOP_CONVENTION if lora.lora_of(case) is not None else FLOP_CONVENTION
    else:
        model, hardware = layout_flops_per_sample(case, spec.input_size, spec.layout.recompute)
        convention = "Megatron-LM (Narayanan et al. 2021): causal attention counted as the full square"
    return {"model": model, "hardware": hardware, "recompute": spec.layout.recompute, "convention": convention}


def mixed_precision(numerics: Numerics) -> tuple[Any, str]:
    """FSDP2's MixedPrecisionPolicy for the point's precision, and what it does (the point's fact): for bf16,
    parameters all-gathered and used in bf16 and gradients reduce-scattered in fp32, as torchtitan (the anchors'
    stack) trains; otherwise the default policy (parameters and reduction in their own fp32)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if numerics.compute_dtype == "bfloat16":
        return (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
            "MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): parameters all-gathered and used in "
            "bf16, gradients reduce-scattered in fp32 (torchtitan's), fp32 master weights and optimizer state",
        )
    return MixedPrecisionPolicy(), "MixedPrecisionPolicy(): parameters and gradients in fp32"


def lora_facts(spec: PointSpec, case: Case) -> dict[str, object] | None:
    """A LoRA point's adapters, trainable and frozen counts and FLOPs of one sequence by both conventions (#47),
    or None where the whole model trains."""
    if lora.lora_of(case) is None or not isinstance(case.arch, LlamaConfig):
        return None
    full = llama_flops(case, spec.input_size, full_model=True)
    return lora.figures(case, param_count(case.arch), full, llama_flops(case, spec.input_size))


def layout_facts(spec: PointSpec, case: Case, device: torch.device, dp_how: str) -> dict[str, object]:
    """What a split point records of its layout: the parallel degrees and how each is done, recompute, FLOPs, loader,
    optimizer, LoRA adapters and the pipeline's schedule."""
    lay, llama = spec.layout, isinstance(case.arch, LlamaConfig)
    facts: dict[str, object] = {
        "layout": lay.label + (" FSDP" if spec.layout.fsdp else ""),
        "parallel": {
            "data": lay.data,
            "tensor": lay.tensor_parallel,
            "pipeline": lay.pipeline_parallel,
            "fsdp": spec.layout.fsdp,
        },
        "data_parallel": dp_how,
        "tensor_parallel": (
            "torch.distributed.tensor.parallel: column/row-split attention and MLP, "
            + ("sequence-parallel norms, " if llama else "")
            + "vocabulary-parallel embedding and loss"
        )
        if lay.tensor_parallel > 1
        else "none",
        "recompute": "torch.utils.checkpoint per block" if lay.recompute else "none",
        FLOPS_KEY[llama]: flops_facts(spec, case),
        "loader": data.describe(spec),
        "compiled": "eager",
        "optimizer": f"{case.optimizer.name}{' (fused)' if device.type == 'cuda' else ''}",
    }
    adapters = lora_facts(spec, case)
    if adapters is not None:
        facts["lora"] = adapters
    if lay.pipeline_parallel > 1:
        facts["pipeline"] = {
            "schedule": TITLES[spec.layout.schedule],
            "stages": lay.pipeline_parallel,
            "micro_batches": lay.micro_batches,
            "bubble": lay.bubble,
        }
    return facts


def build(
    spec: PointSpec, case: Case, ctx: RankContext, device: torch.device, numerics: Numerics, facts: dict[str, object]
) -> Trainer:
    """Join the ranks as a (pp, dp, tp) mesh, build this rank's stage and shards (models.build_model with the
    mesh in its build context), shard the replicas with FSDP2, and the trainer; what was chosen goes in facts."""
    from torch.distributed.fsdp import fully_shard

    from dlbench.backends.torch import gpt_parallel, pipeline

    mesh = gpt_parallel.mesh_for(spec, device, ctx)
    stage = build_model(case, BuildContext.of(spec, ctx, device, mesh)).to(device)
    if spec.converge and lora.lora_of(case) is not None:  # LoRA fine-tunes a base dlbench pretrained (#47)
        from dlbench.backends.torch.lora import load_pretrained

        facts["lora_base"] = load_pretrained(stage, case, spec.input_size, device)
    lay, llama = spec.layout, isinstance(case.arch, LlamaConfig)
    dp_how = "none"
    policy, policy_how = mixed_precision(numerics)
    if llama and lay.data > 1:
        from dlbench.backends.torch.llama_parallel import shard_data_parallel

        dp_how = shard_data_parallel(stage, mesh, spec.layout.fsdp, lay.pipeline_parallel > 1, policy)
    elif lay.data > 1:
        fully_shard(stage, mesh=mesh["dp"], reshard_after_forward=False, mp_policy=policy)
        dp_how = "FSDP2 (fully_shard over the dp mesh dimension)"
    if lay.data > 1:
        facts["fsdp_mixed_precision"] = policy_how
    dp = mesh["dp"].get_local_rank()
    facts.update(layout_facts(spec, case, device, dp_how))
    batches = data.batches(spec, case, device, spec.seed + dp)  # a replica's ranks share its samples
    return pipeline.SplitTrainer(spec, case, stage, batches, device, numerics, mesh, facts)


__all__ = ["FLOPS_KEY", "TITLES", "build", "flops_facts", "layout_facts", "lora_facts", "mixed_precision"]
