"""torch.distributed for dlbench: the process group (gloo on the CPU, NCCL on GPUs) and the gradient strategies.

The launcher (torchrun, srun, mpirun or the hosts launcher) sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT (the rank contract, dlbench.wire); this module initialises from them when the spec has several
devices. A rank's GPU is its local rank modulo the GPUs it sees (RankContext.device_index), so that Slurm's
per-task binding and CUDA_VISIBLE_DEVICES are honoured.

- ``ddp``: DistributedDataParallel, bucketed all-reduce overlapped with the backward pass;
- ``allreduce``: after the backward pass, one all-reduce per gradient tensor, no overlap;
- ``ps``: gradients reduced to rank 0 (the parameter server), updated there, parameters broadcast back;
- ``ddp-fp16``, ``ddp-bf16``, ``powersgd``, ``replicated-pscpu``: DDP with a communication hook (hooks.py);
- ``dp``: ``nn.DataParallel``, ONE process over the node's GPUs (module replicated from GPU 0 every step,
  gradients reduced to GPU 0); PyTorch itself recommends DDP instead. It cannot run several CPU devices.

``none`` with several devices means torch's usual data parallelism, ``ddp``. ``--bucket-mb`` sets DDP's
``bucket_cap_mb`` (25 by default) for ddp and its hooks.
"""

from __future__ import annotations

import atexit
import datetime
from collections.abc import Callable
from typing import cast

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from dlbench.backends.base import strategy_run
from dlbench.backends.torch import hooks
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

STRATEGIES: tuple[str, ...] = ("ddp", "allreduce", "ps", "dp", *hooks.HOOKED)


def strategy(spec: PointSpec) -> str:
    """The strategy this point runs: 'none' alone, else the spec's, with 'none' meaning 'ddp'."""
    return strategy_run(spec, "ddp")


def device_for(spec: PointSpec, ctx: RankContext) -> torch.device:
    """The device of this rank: on a GPU, its local rank modulo the GPUs this process sees (dp: GPU 0, where
    DataParallel gathers)."""
    if spec.device == "cuda" and strategy(spec) == "dp":
        return torch.device("cuda", 0)
    if spec.device == "cuda":
        return torch.device("cuda", ctx.device_index(torch.cuda.device_count()))
    return torch.device("cpu")


def environment(spec: PointSpec) -> dict[str, str]:
    """Facts of a multi-device point known before it starts: communication backend and strategy."""
    if spec.world_size == 1:
        return {}
    if strategy(spec) == "dp":
        return {"dist_backend": "none (one process)", "strategy_run": "dp"}
    if spec.layout.expert_parallel > 1:  # moe_parallel.py's exchange and gradient sync, not DDP (#36)
        return {"dist_backend": "nccl" if spec.device == "cuda" else "gloo", "strategy_run": "expert-parallel"}
    return {"dist_backend": "nccl" if spec.device == "cuda" else "gloo", "strategy_run": strategy(spec)}


def init(spec: PointSpec, device: torch.device, ctx: RankContext) -> None:
    """Join the process group from the launcher's variables; checks the world size the launcher started."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=ctx.rdzv_timeout_s)
    dist.init_process_group(backend, init_method="env://", timeout=timeout)
    atexit.register(dist.destroy_process_group)
    if dist.get_world_size() != spec.world_size:
        raise RuntimeError(f"the launcher started {dist.get_world_size()} ranks; the spec asks for {spec.world_size}")


class GradSync:
    """How gradients meet between backward and the optimizer step; this one does nothing (1 device, DDP)."""

    def update(self, optimizer_step: Callable[[], object]) -> None:
        """Exchange gradients as the strategy says, then apply the optimizer step."""
        optimizer_step()


class AllReduceSync(GradSync):
    """One blocking all-reduce per gradient tensor after the backward pass, averaged; no overlap."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]

    def update(self, optimizer_step: Callable[[], object]) -> None:
        world = dist.get_world_size()
        for p in self.params:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        optimizer_step()


class ParameterServerSync(GradSync):
    """Gradients summed on rank 0, which alone updates; then every parameter is broadcast from it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]

    def update(self, optimizer_step: Callable[[], object]) -> None:
        world = dist.get_world_size()
        for p in self.params:
            if p.grad is not None:
                dist.reduce(p.grad, dst=0)
        if dist.get_rank() == 0:
            for p in self.params:
                if p.grad is not None:
                    p.grad.div_(world)
            optimizer_step()
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p.data, src=0)


def setup(
    spec: PointSpec, model: torch.nn.Module, device: torch.device, ctx: RankContext
) -> tuple[torch.nn.Module, GradSync, dict[str, object]]:
    """Join the process group and wrap or hook the model for the strategy (nothing on one device); with what the
    point runs, for its facts."""
    chosen = strategy(spec)
    if chosen == "none":
        return model, GradSync(), {}
    if chosen == "dp":  # one process: DataParallel scatters the global batch from GPU 0 over the node's GPUs
        gpus = list(range(spec.devices_per_node))
        return (
            torch.nn.DataParallel(model, device_ids=gpus),
            GradSync(),
            {
                "communication": f"nn.DataParallel: module broadcast from cuda:0 to cuda:0-{gpus[-1]} every step, "
                "gradients reduced to cuda:0"
            },
        )
    init(spec, device, ctx)
    if getattr(model, "sharded", False):  # a split classifier (face): DDP over the replicated part only
        model.replicated = DistributedDataParallel(
            model.replicated, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
        )
        return model, GradSync(), {}
    if chosen == "ddp" or chosen in hooks.HOOKED:  # DDP broadcasts rank 0's parameters and buffers on construction
        ids = [device.index] if device.type == "cuda" else None
        mb = hooks.bucket_mb(spec.layout.bucket_mb)
        # Gradients as views into DDP's buckets: no copy between them and the all-reduce buffers.
        # A MoE's expert that no token chose in a step has no gradient: DDP must look for such parameters (#36).
        unused = hasattr(model, "moe")
        ddp = DistributedDataParallel(
            model, device_ids=ids, gradient_as_bucket_view=True, bucket_cap_mb=mb, find_unused_parameters=unused
        )
        return ddp, GradSync(), {"bucket_cap_mb": mb, **hooks.register(chosen, ddp, device)}
    with torch.no_grad():  # every rank starts from rank 0's parameters, as DDP would
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
    return model, AllReduceSync(model) if chosen == "allreduce" else ParameterServerSync(model), {}


def param_checksum(model: torch.nn.Module) -> float:
    """A position-weighted float64 sum of every parameter: equal on ranks that hold the same parameters (of a
    split classifier's model, the replicated part's: each rank's shard is its own; FSDP2's shards are gathered,
    a collective)."""
    if getattr(model, "sharded", False):
        model = cast(torch.nn.Module, model.replicated)
    # An expert-parallel rank's experts are its own (moe_parallel.py): the replicated parameters are compared.
    mine = getattr(model, "sharded_experts", False)
    with torch.no_grad():
        total = torch.zeros((), dtype=torch.float64)
        params = [p for n, p in model.named_parameters() if not (mine and ".experts." in n)]
        for i, p in enumerate(params):
            whole = p.full_tensor() if isinstance(p, DTensor) else p  # FSDP2's shards gathered (a DiT, #48)
            total += (i + 1) * whole.detach().to(torch.float64).sum().cpu()
    return float(total)
