"""GPT tensor parallel in JAX (#23): one (data, model) mesh over every process's device and Megatron-LM's split
written as shardings of the weights, which XLA's SPMD partitioner turns into the collectives.

- the fused query/key/value and the MLP's first matrix split by columns (``P(None, "model")``; the fused
  projection's columns run head by head, gpt.py, so each device keeps whole heads), the attention output and the
  MLP's second matrix by rows (``P("model", None)``); the token embedding, and so the tied output projection and
  its logits, over the vocabulary (``P("model", None)``); layer norms and positions replicated;
- the batch split over ``data`` (the processes of one replica feed it the same rows), the optimizer state
  sharded as the parameters it follows.

JAX has no pipeline schedule in its public API; a pipeline-parallel point is refused from the capability table
(dlbench.capabilities.jax, read by dlbench.refusals).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dlbench.backends.jax.distributed import Placement, put_sharded
from dlbench.backends.jax.step import Batch, JaxTrainer, State, TrainStep
from dlbench.parallel import Layout

DATA, MODEL = "data", "model"
# (module, parameter) -> how the weight is split over the model axis; anything else is replicated.
RULES: dict[tuple[str, str], PartitionSpec] = {
    ("wte", "embedding"): PartitionSpec(MODEL, None),
    ("qkv", "kernel"): PartitionSpec(None, MODEL),
    ("qkv", "bias"): PartitionSpec(MODEL),
    ("fc", "kernel"): PartitionSpec(None, MODEL),
    ("fc", "bias"): PartitionSpec(MODEL),
    ("attn_proj", "kernel"): PartitionSpec(MODEL, None),
    ("proj", "kernel"): PartitionSpec(MODEL, None),
}


def _key(entry: Any) -> str:
    return str(getattr(entry, "key", getattr(entry, "name", entry)))


@dataclass(frozen=True)
class TensorPlacement(Placement):
    """A (data, model) mesh: the batch split over data, the weights as RULES say."""

    layout: Layout = field(default_factory=Layout)

    @classmethod
    def of(cls, devices: list[jax.Device], layout: Layout) -> TensorPlacement:
        """The mesh over every process's device, in process order: consecutive devices share a replica."""
        return cls(Mesh(np.array(devices).reshape(layout.data, layout.tensor_parallel), (DATA, MODEL)), layout)

    @property
    def sharded(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec(DATA))

    def state_shardings(self, tree: Any) -> Any:
        """A sharding per leaf of a state (parameters, and the optimizer's moments that mirror them)."""

        def rule(path: tuple[Any, ...], _: Any) -> NamedSharding:
            names = tuple(_key(p) for p in path[-2:])
            return NamedSharding(self.mesh, RULES.get(names, PartitionSpec()))  # type: ignore[arg-type]

        return jax.tree_util.tree_map_with_path(rule, tree)

    def replicate(self, tree: Any) -> Any:
        """A state every process computed identically, placed leaf by leaf with its sharding."""
        return put_sharded(tree, self.state_shardings(tree))

    def shard(self, local: dict[str, Any]) -> dict[str, jax.Array]:
        """The global batch from this process's rows: those of the replicas its devices sit in (one process per
        device: its replica's rows, the same in each of the replica's processes; one process: all of them)."""
        mine = {i for i, row in enumerate(self.mesh.devices) for d in row if d.process_index == jax.process_index()}
        out = {}
        for k, v in local.items():
            arr = np.asarray(v)
            shape = (arr.shape[0] * self.layout.data // len(mine), *arr.shape[1:])
            out[k] = jax.make_array_from_process_local_data(self.sharded, arr, shape)
        return out


class TensorTrainer(JaxTrainer):
    """The JAX trainer of a point whose parameters are sharded (a GPT's tensor split, a Llama's mesh): its
    parameters' checksum is taken over the whole arrays."""

    def __init__(
        self, batches: Iterator[Batch], state: State, step_fn: TrainStep, device: jax.Device, placement: Placement
    ) -> None:
        super().__init__(batches, state, step_fn, device)
        self.placement = placement

    def param_checksum(self) -> float:
        return checksum(self.state.params, self.placement)


def checksum(params: Any, placement: Placement) -> float:
    """A position-weighted sum of every parameter over its whole (sharded) array: the same on every process."""

    def total(tree: Any) -> jax.Array:
        leaves = jax.tree_util.tree_leaves(tree)
        return sum(
            ((i + 1) * jnp.sum(leaf.astype(jnp.float32)) for i, leaf in enumerate(leaves)),
            start=jnp.zeros((), jnp.float32),
        )

    out = jax.jit(total, out_shardings=placement.replicated)(params)
    return float(np.asarray(out.addressable_data(0)))


__all__ = ["DATA", "MODEL", "RULES", "TensorPlacement", "TensorTrainer", "checksum"]
