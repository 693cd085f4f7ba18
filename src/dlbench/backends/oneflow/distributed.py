"""OneFlow on several devices: ``oneflow.nn.parallel.DistributedDataParallel`` over OneFlow's own runtime.

OneFlow joins its ranks when it is imported, from the rank contract's variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT: dlbench.wire), which the launcher sets before the worker starts. Its collectives are
NCCL on GPUs and OneFlow's own CPU communication on the CPU. DDP broadcasts rank 0's parameters and buffers when
it wraps the model and all-reduces (averages) gradients during the backward pass. ``none`` on several devices
means ``ddp``, the only strategy wired.
"""

from __future__ import annotations

import oneflow as flow
from oneflow import nn
from oneflow.nn.parallel import DistributedDataParallel

from dlbench.backends.base import Unsupported, strategy_run
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

STRATEGIES: tuple[str, ...] = ("ddp",)


def device_for(spec: PointSpec, ctx: RankContext) -> flow.device:
    """The device of this rank: on a GPU, its local rank modulo the GPUs this process sees."""
    if spec.device == "cuda":
        return flow.device("cuda", ctx.device_index(flow.cuda.device_count()))
    return flow.device("cpu")


def environment(spec: PointSpec) -> dict[str, str]:
    """Facts of a multi-device point known before it starts: communication backend and strategy."""
    if spec.world_size == 1:
        return {}
    comm = "nccl" if spec.device == "cuda" else "oneflow (CPU)"
    return {"dist_backend": comm, "strategy_run": strategy_run(spec, "ddp")}


def setup(spec: PointSpec, model: nn.Module) -> nn.Module:
    """Wrap the model in DDP on several devices (nothing on one); checks the world OneFlow joined."""
    if spec.world_size == 1:
        return model
    joined = flow.env.get_world_size()
    if joined != spec.world_size:
        raise Unsupported(
            f"OneFlow joined {joined} ranks; the spec asks for {spec.world_size} (are RANK, "
            "WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for every rank?)"
        )
    return DistributedDataParallel(model)


def param_checksum(model: nn.Module) -> float:
    """A position-weighted float64 sum of every parameter: equal on ranks that hold the same parameters."""
    total = 0.0
    with flow.no_grad():
        for i, p in enumerate(model.parameters()):
            total += (i + 1) * float(p.detach().to(flow.float64).sum().numpy())
    return total
