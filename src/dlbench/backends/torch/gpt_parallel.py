"""GPT split over devices with torch's native APIs, Megatron-LM's way (Shoeybi et al. 2019; Narayanan et al. 2021).

- The device mesh: ``init_device_mesh`` over (pp, dp, tp), tensor-parallel ranks adjacent (within a node first).
- Tensor parallel (``torch.distributed.tensor.parallel``): in each block the fused query/key/value and the MLP's
  first matrix are split by columns (``ColwiseParallel``), the attention output and the MLP's second matrix by
  rows (``RowwiseParallel``, whose output is all-reduced): two all-reduces forward and two backward per block.
  Each rank keeps whole heads: the fused projection's rows are ordered [q_r; k_r; v_r] per rank first. The
  token embedding is split over the vocabulary (``RowwiseParallel`` on ``nn.Embedding``) and so is the tied
  output projection (``ColwiseParallel``, logits left sharded), whose cross-entropy runs under ``loss_parallel``
  without gathering the logits.
- Pipeline parallel: the layers split into P equal stages; this rank builds its stage only. With a tied head the
  last stage holds a copy of the token embedding, and the two copies' gradients are summed over the embedding
  group (first and last stage of each data x tensor coordinate), as Megatron-LM does.

Every parameter is drawn from its own name's generator (gpt.py), so a stage or a shard starts from the whole
model's weights: a split point and one device train the same model. A stage is materialised block by block on
the host and sharded at once, so a rank never holds more than one unsharded block.
"""

from __future__ import annotations

import atexit
import datetime

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from dlbench.backends.context import BuildContext
from dlbench.backends.torch.gpt import GptLMHeadModel, Part, init_parameter
from dlbench.cases.arch import GptConfig
from dlbench.parallel import Layout
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

DIMS = ("pp", "dp", "tp")
BLOCK_PLAN = {
    "attn.qkv": ColwiseParallel(),
    "attn.proj": RowwiseParallel(),
    "fc": ColwiseParallel(),
    "proj": RowwiseParallel(),
}


def mesh_for(spec: PointSpec, device: torch.device, ctx: RankContext) -> DeviceMesh:
    """Join the process group (gloo on the CPU, NCCL on GPUs) and lay the ranks out as (pp, dp, tp)."""
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=ctx.rdzv_timeout_s)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method="env://", timeout=timeout)
        atexit.register(dist.destroy_process_group)
    if dist.get_world_size() != spec.world_size:
        raise RuntimeError(f"the launcher started {dist.get_world_size()} ranks; the spec asks for {spec.world_size}")
    lay = spec.layout
    return init_device_mesh(device.type, (lay.pipeline_parallel, lay.data, lay.tensor_parallel), mesh_dim_names=DIMS)


def stage_part(layers: int, stages: int, stage: int) -> Part:
    """Stage `stage`'s equal share of the layers."""
    per = layers // stages
    return Part(stage * per, (stage + 1) * per, stage == 0, stage == stages - 1)


def _heads_per_rank(module: nn.Linear, hidden: int, tensor: int) -> None:
    """Order a fused [q; k; v] projection's rows as [q_0; k_0; v_0; q_1; ...]: a column split then gives each
    tensor-parallel rank whole heads of all three (a permutation of outputs; the function is unchanged)."""
    with torch.no_grad():
        for p in (module.weight, module.bias):
            q, k, v = p.split(hidden, 0)
            p.copy_(
                torch.cat(
                    [torch.cat([q.chunk(tensor)[r], k.chunk(tensor)[r], v.chunk(tensor)[r]]) for r in range(tensor)]
                )
            )


def _materialise(module: nn.Module, prefix: str, cfg: GptConfig) -> None:
    """Give a module built on the meta device host memory and its named parameters' initial values."""
    module.to_empty(device="cpu", recurse=True)
    for name, p in module.named_parameters():
        init_parameter(cfg, prefix + name, p)


def build_stage(cfg: GptConfig, ctx: BuildContext) -> nn.Module:
    """This rank's pipeline stage of the decoder, its layers and vocabulary split over the tensor-parallel ranks
    (``ctx.groups`` is the (pp, dp, tp) mesh)."""
    lay: Layout = ctx.layout
    mesh: DeviceMesh = ctx.groups
    part = stage_part(cfg.num_layers, lay.pipeline_parallel, mesh["pp"].get_local_rank())
    with torch.device("meta"):
        stage = GptLMHeadModel(cfg, lay.recompute, part)
    tied = cfg.tied_embeddings and part.first and part.last
    if tied:  # shard the two uses apart, then tie the shards
        stage.lm_head.weight = nn.Parameter(torch.empty_like(stage.wte.weight))
    tp = mesh["tp"] if lay.tensor_parallel > 1 else None
    for name, child in stage.named_children():
        if isinstance(child, nn.ModuleDict):  # the blocks
            for i, block in child.items():
                _materialise(block, f"blocks.{i}.", cfg)
                if tp is not None:
                    _heads_per_rank(block.get_submodule("attn.qkv"), cfg.hidden_size, lay.tensor_parallel)  # type: ignore[arg-type]
                    parallelize_module(block, tp, dict(BLOCK_PLAN))
        else:
            _materialise(child, f"{name}.", cfg)
            if tp is not None and name == "wte":
                parallelize_module(child, tp, RowwiseParallel(input_layouts=Replicate()))
            elif tp is not None and name == "lm_head":
                parallelize_module(child, tp, ColwiseParallel(output_layouts=Shard(-1), use_local_output=False))
    if tied:
        stage.lm_head.weight = stage.wte.weight
    return stage


def embedding_group(mesh: DeviceMesh, layout: Layout) -> dist.ProcessGroup | None:
    """The group of this rank's first and last stage (same data and tensor coordinates), whose copies of the tied
    embedding are kept equal; None without a pipeline. Every rank creates every group, in the same order."""
    if layout.pipeline_parallel == 1:
        return None
    mine = None
    me = dist.get_rank()
    for d in range(layout.data):
        for t in range(layout.tensor_parallel):
            ranks = [int(mesh.mesh[0, d, t]), int(mesh.mesh[layout.pipeline_parallel - 1, d, t])]
            group = dist.new_group(ranks)
            mine = group if me in ranks else mine
    return mine


def tied_weight(stage: nn.Module) -> nn.Parameter | None:
    """The stage's copy of the tied embedding: the token embedding on the first stage, the head on the last."""
    part: Part = stage.part  # type: ignore[assignment]
    if not stage.cfg.tied_embeddings or (part.first and part.last):  # type: ignore[union-attr]
        return None
    owner = stage.get_submodule("wte" if part.first else "lm_head")
    return owner.weight  # type: ignore[return-value]


def settle_gradients(stage: nn.Module, group: dist.ProcessGroup | None) -> None:
    """After backward: each sharded gradient in its parameter's layout (an embedding's comes back replicated),
    then the tied embedding's two copies summed over the embedding group."""
    for p in stage.parameters():
        g = p.grad
        if isinstance(g, DTensor) and isinstance(p, DTensor) and g.placements != p.placements:
            p.grad = g.redistribute(placements=p.placements)
    w = tied_weight(stage)
    if group is not None and w is not None and w.grad is not None:
        g = w.grad
        dist.all_reduce(g.to_local() if isinstance(g, DTensor) else g, group=group)


def checksum(stage: nn.Module, mesh: DeviceMesh) -> float:
    """A position-weighted float64 sum of the whole model's parameters, gathered from every shard and summed
    over the stages: the same on every rank exactly when the data-parallel replicas agree (a collective)."""
    with torch.no_grad():
        total = torch.zeros((), dtype=torch.float64)
        for i, p in enumerate(stage.parameters()):
            full = p.full_tensor() if isinstance(p, DTensor) else p
            total += (i + 1) * full.detach().to(torch.float64).sum().cpu()
    out = total.to(mesh.device_type)
    dist.all_reduce(out, group=mesh["pp"].get_group())
    return float(out.item())


__all__ = [
    "BLOCK_PLAN",
    "DIMS",
    "build_stage",
    "checksum",
    "embedding_group",
    "mesh_for",
    "settle_gradients",
    "stage_part",
    "tied_weight",
]
