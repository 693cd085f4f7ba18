"""A Llama decoder split over devices with torch's native APIs, as torchtitan lays it out, on one device mesh.

- The mesh: gpt_parallel.mesh_for's (pp, dp, tp), tensor-parallel ranks adjacent.
- Tensor parallel with sequence parallel (``parallelize_module``, DTensor): in each block the query, key, value and
  SwiGLU's gate and up matrices are split by columns, the attention output and the down matrix by rows, whose
  outputs are reduce-scattered over the sequence (``RowwiseParallel(output_layouts=Shard(1))``); the RMSNorms run
  on each rank's slice of the sequence (``SequenceParallel``) and the attention and MLP gather it first
  (``PrepareModuleInput``). Whole heads per rank: query heads and key/value heads are split in contiguous groups,
  so a rank's query heads read its own key/value heads. The token embedding is split over the vocabulary and
  leaves the sequence sharded; the LM head is split over the vocabulary and its cross-entropy runs under
  ``loss_parallel`` without gathering the logits.
- FSDP2 (``fully_shard`` over the mesh's dp dimension, ``--fsdp``): each block, then the stage, parameters,
  gradients and optimizer state sharded over the data-parallel ranks; gathered per block for its forward and
  backward (``reshard_after_forward``; kept between forward and backward within a pipeline, whose micro-batches
  would gather them again each time).
- Pipeline: pipeline.py's schedules over the stages gpt_parallel.stage_part gives (equal layers).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from dlbench.backends.context import BuildContext
from dlbench.backends.torch.gpt_parallel import stage_part
from dlbench.backends.torch.llama import LlamaModel, init_parameter
from dlbench.cases.arch import LlamaConfig


def block_plan() -> dict[str, object]:
    """torchtitan's tensor- and sequence-parallel plan of one block (fresh styles for each block)."""
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "attention_norm": SequenceParallel(),
        "attention": gather,
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def _materialise(module: nn.Module, prefix: str, cfg: LlamaConfig) -> None:
    """Give a module built on the meta device host memory and its named parameters' initial values."""
    module.to_empty(device="cpu", recurse=True)
    for name, p in module.named_parameters():
        init_parameter(cfg, prefix + name, p)


def build_stage(cfg: LlamaConfig, ctx: BuildContext) -> nn.Module:
    """This rank's pipeline stage, its blocks, embedding and head split over the tensor-parallel ranks with
    sequence parallel (``ctx.groups`` is the (pp, dp, tp) mesh); built on the meta device and materialised block
    by block, so that a rank never holds more than one unsharded block."""
    lay, mesh = ctx.layout, ctx.groups
    assert isinstance(mesh, DeviceMesh)
    part = stage_part(cfg.num_layers, lay.pipeline_parallel, mesh["pp"].get_local_rank())
    with torch.device("meta"):
        stage = LlamaModel(cfg, lay.recompute, part)
    tied = cfg.tied_embeddings and part.first and part.last
    if tied:  # shard the two uses apart, then tie the shards (both are split over the vocabulary: Shard(0))
        stage.lm_head.weight = nn.Parameter(torch.empty_like(stage.wte.weight))
    tp = mesh["tp"] if lay.tensor_parallel > 1 else None
    for name, child in stage.named_children():
        if isinstance(child, nn.ModuleDict):
            for i, block in child.items():
                _materialise(block, f"blocks.{i}.", cfg)
                if tp is not None:
                    parallelize_module(block, tp, block_plan())  # type: ignore[arg-type]
            continue
        _materialise(child, f"{name}.", cfg)
        if tp is None:
            continue
        if name == "wte":
            parallelize_module(child, tp, RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)))
        elif name == "norm":
            parallelize_module(child, tp, SequenceParallel())
        elif name == "lm_head":
            parallelize_module(
                child, tp, ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
            )
    if tied:
        stage.lm_head.weight = stage.wte.weight
    return stage


def shard_data_parallel(stage: nn.Module, mesh: DeviceMesh, fsdp: bool, pipeline: bool, policy: Any) -> str:
    """Shard a stage over the data-parallel ranks with FSDP2 under `policy` (its MixedPrecisionPolicy); what was
    done, for the point's facts. `fsdp`: each block and then the stage (ZeRO-3: parameters regathered per block);
    else the stage as one unit with its parameters kept gathered between forward and backward (the replicas of a
    split model, as GPT's)."""
    from torch.distributed.fsdp import fully_shard

    dp = mesh["dp"]
    if not fsdp:
        fully_shard(stage, mesh=dp, reshard_after_forward=False, mp_policy=policy)
        return "FSDP2 (fully_shard of the stage over the dp mesh dimension, kept gathered in the step)"
    per_block = not pipeline
    for block in stage.get_submodule("blocks").values():  # type: ignore[operator]
        fully_shard(block, mesh=dp, reshard_after_forward=per_block, mp_policy=policy)
    fully_shard(stage, mesh=dp, reshard_after_forward=per_block, mp_policy=policy)
    return (
        "FSDP2 --fsdp (fully_shard per block and the stage over the dp mesh dimension: parameters, gradients "
        f"and optimizer state sharded{', regathered per block' if per_block else ''})"
    )


__all__ = ["block_plan", "build_stage", "shard_data_parallel"]
