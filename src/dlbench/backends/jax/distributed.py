"""Several JAX processes as one data-parallel job: ``jax.distributed`` from the launcher's variables, one mesh
over every process's devices, and where the train state and the batches live on it.

The launcher (the local or hosts launcher, mpirun, srun) sets the rank variables, which the worker reads into a
`RankContext` (dlbench.wire). The one strategy is ``sharding``: parameters and optimizer state are
replicated, the batch is split along its first axis (each process contributes its own per-device batch), and
XLA's partitioner inserts the all-reduce of the gradients into the jitted step. On the CPU the cross-process
collectives are gloo's. ``none`` with several devices means ``sharding``.

The mean over the batch axis is a mean over the global batch, so BatchNorm statistics are synchronised across
processes (torch's DDP keeps them per rank).
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dlbench.backends.base import strategy_run
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

STRATEGIES: tuple[str, ...] = ("sharding",)
AXIS = "batch"
CPU_COLLECTIVES = "gloo"


def strategy(spec: PointSpec) -> str:
    """The strategy this point runs: 'none' alone, else the spec's, with 'none' meaning 'sharding'."""
    return strategy_run(spec, "sharding")


def join(spec: PointSpec, ctx: RankContext, gpu: int | None) -> None:
    """Join the job from the rank context (several devices only; once), before JAX starts a backend; `gpu` is
    the ordinal of this rank's GPU among the visible ones (None on the CPU)."""
    if strategy(spec) == "none" or jax.distributed.is_initialized():
        return
    jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)
    jax.distributed.initialize(
        coordinator_address=f"{ctx.master_addr}:{ctx.master_port}",
        num_processes=ctx.world_size,
        process_id=ctx.rank,
        local_device_ids=None if gpu is None else [gpu],
        cluster_detection_method="deactivate",
        initialization_timeout=int(ctx.rdzv_timeout_s),
    )
    atexit.register(jax.distributed.shutdown)  # a barrier: rank 0 hosts the coordinator, it must not leave first
    if jax.process_count() != spec.world_size:
        raise RuntimeError(f"the launcher started {jax.process_count()} processes; the spec asks for {spec.world_size}")


def facts(spec: PointSpec) -> dict[str, str]:
    """What the job runs on (several devices only): strategy, processes, collectives."""
    if strategy(spec) == "none":
        return {}
    comm = CPU_COLLECTIVES if spec.device == "cpu" else "nccl (XLA)"
    return {"strategy_run": strategy(spec), "jax_processes": str(jax.process_count()), "dist_backend": comm}


@dataclass(frozen=True)
class Placement:
    """A one-axis mesh over the job's devices: the state replicated on it, batches split along it."""

    mesh: Mesh

    @classmethod
    def over(cls, devices: list[jax.Device]) -> Placement:
        """The mesh over these devices (every process's, in process order)."""
        return cls(Mesh(np.array(devices), (AXIS,)))

    @property
    def replicated(self) -> NamedSharding:
        """Every device holds the whole value."""
        return NamedSharding(self.mesh, PartitionSpec())

    @property
    def sharded(self) -> NamedSharding:
        """Split along the first (batch) axis."""
        return NamedSharding(self.mesh, PartitionSpec(AXIS))

    def replicate(self, tree: Any) -> Any:
        """A pytree that every process computed identically, replicated on the mesh (no cross-process check:
        the ranks' parameter checksums are compared after the run)."""
        if self.replicated.is_fully_addressable:
            return jax.device_put(tree, self.replicated)

        def put(x: Any) -> jax.Array:
            host = np.asarray(x)
            host = host.astype(jax.dtypes.canonicalize_dtype(host.dtype), copy=False)
            return jax.make_array_from_callback(host.shape, self.replicated, lambda index: host[index])

        return jax.tree_util.tree_map(put, jax.device_get(tree))

    def shard(self, local: dict[str, Any]) -> dict[str, jax.Array]:
        """One global batch from this process's rows (its per-device batch), split along the batch axis."""
        return {k: jax.make_array_from_process_local_data(self.sharded, np.asarray(v)) for k, v in local.items()}


def put_sharded(tree: Any, shardings: Any) -> Any:
    """A pytree that every process computed identically, placed leaf by leaf with its sharding: each process puts
    only its own devices' shards (one process, or one per device)."""

    def put(x: Any, sharding: NamedSharding) -> jax.Array:
        host = np.asarray(x)
        host = host.astype(jax.dtypes.canonicalize_dtype(host.dtype), copy=False)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree_util.tree_map(put, jax.device_get(tree), shardings)


def placement(spec: PointSpec, device: jax.Device) -> Placement:
    """The whole job's mesh for several devices, else a mesh of this one device."""
    if strategy(spec) == "none":
        return Placement.over([device])
    return Placement.over(jax.devices(device.platform))
