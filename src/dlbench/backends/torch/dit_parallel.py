"""FSDP2 for FLUX.1's transformer (#48, ``--fsdp``), as torchtitan shards it for MLPerf's reference: over the
point's ranks (a one-dimensional data-parallel mesh), ``fully_shard`` of every double and single block, then of
the whole model (the embedders and the final layer with it): parameters, gradients and optimizer state sharded,
each block's parameters all-gathered for its forward and again for its backward (``reshard_after_forward``), the
gradients reduce-scattered and averaged over the ranks; in bf16 under split.py's MixedPrecisionPolicy (bf16
parameters, fp32 reduction, torchtitan's). Each rank draws its own noise and times (dit.py), on its own samples.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import distributed
from dlbench.backends.torch.distributed import GradSync
from dlbench.numerics import Numerics
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


def setup(
    spec: PointSpec, model: nn.Module, device: torch.device, ctx: RankContext, numerics: Numerics
) -> tuple[nn.Module, GradSync, dict[str, Any]]:
    """Join the process group and shard the model (this module's docstring); the gradient exchange is FSDP's own
    (a plain GradSync steps the optimizer), with what the point runs, for its facts."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dlbench.backends.torch.split import mixed_precision

    distributed.init(spec, device, ctx)
    mesh = init_device_mesh(device.type, (spec.world_size,), mesh_dim_names=("dp",))
    policy, how = mixed_precision(numerics)
    for name in ("double_blocks", "single_blocks"):
        for block in model.get_submodule(name).children():
            fully_shard(block, mesh=mesh, reshard_after_forward=True, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=True, mp_policy=policy)
    return (
        model,
        GradSync(),
        {
            "data_parallel": (
                f"FSDP2 --fsdp over {spec.world_size} ranks (fully_shard per double and single block and the model: "
                "parameters, gradients and optimizer state sharded, regathered per block)"
            ),
            "fsdp_mixed_precision": how,
        },
    )


__all__ = ["setup"]
