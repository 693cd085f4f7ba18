"""The Llama decoder (#35) over one JAX mesh with `data`, `fsdp` and `tensor` axes, written as sharding
annotations that XLA's SPMD partitioner turns into the collectives (MaxText's way).

- `tensor`: Megatron's split: the query, key, value and SwiGLU gate and up kernels by columns
  (``P("fsdp", "tensor")``), the attention output and down kernels by rows (``P("tensor", "fsdp")``), the token
  embedding and the LM head over the vocabulary;
- `fsdp`: every kernel's other dimension sharded over the fsdp axis (ZeRO-3: XLA gathers a layer's weights where
  it is used and reduce-scatters its gradients); the optimizer's moments follow their parameters;
- `data` and `fsdp` both split the batch (``P(("data", "fsdp"))``): the fsdp ranks are data-parallel ranks that
  also shard the state; norms are replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dlbench.backends.jax.distributed import Placement, put_sharded
from dlbench.spec import PointSpec

AXES = ("data", "fsdp", "tensor")
COLUMNS, ROWS = PartitionSpec("fsdp", "tensor"), PartitionSpec("tensor", "fsdp")
# (module, parameter) -> its sharding; anything else (the RMSNorm scales) is replicated.
RULES: dict[tuple[str, str], PartitionSpec] = {
    ("wq", "kernel"): COLUMNS,
    ("wk", "kernel"): COLUMNS,
    ("wv", "kernel"): COLUMNS,
    ("w1", "kernel"): COLUMNS,
    ("w3", "kernel"): COLUMNS,
    ("wo", "kernel"): ROWS,
    ("w2", "kernel"): ROWS,
    ("wte", "embedding"): PartitionSpec("tensor", "fsdp"),
    ("lm_head", "kernel"): COLUMNS,
}


def _key(entry: Any) -> str:
    return str(getattr(entry, "key", getattr(entry, "name", entry)))


@dataclass(frozen=True)
class LlamaPlacement(Placement):
    """A (data, fsdp, tensor) mesh: the batch over data x fsdp, the weights as RULES say."""

    @classmethod
    def of(cls, devices: list[jax.Device], data: int, fsdp: int, tensor: int) -> LlamaPlacement:
        """The mesh over these devices in order: tensor ranks adjacent, then fsdp, then data."""
        if data * fsdp * tensor != len(devices):
            raise ValueError(f"a {data}x{fsdp}x{tensor} mesh needs {data * fsdp * tensor} devices, not {len(devices)}")
        return cls(Mesh(np.array(devices).reshape(data, fsdp, tensor), AXES))

    @classmethod
    def for_spec(cls, devices: list[jax.Device], spec: PointSpec) -> LlamaPlacement:
        """A point's mesh: its tensor ranks, and its data-parallel ranks as the fsdp axis with --fsdp, else data."""
        replicas, tensor = spec.layout.data, spec.layout.tensor_parallel
        return cls.of(devices, 1 if spec.layout.fsdp else replicas, replicas if spec.layout.fsdp else 1, tensor)

    @property
    def shape(self) -> dict[str, int]:
        """Each axis's size: {'data': 1, 'fsdp': 2, 'tensor': 1}."""
        return dict(zip(AXES, self.mesh.devices.shape, strict=True))

    @property
    def sharded(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec(("data", "fsdp")))

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
        """The global batch from this process's rows: those of the (data, fsdp) replicas its devices sit in (one
        process per device: its replica's rows, the same in each of its tensor ranks; one process: all of them)."""
        grid = self.mesh.devices.reshape(-1, self.mesh.devices.shape[-1])  # a row of tensor ranks per replica
        mine = {i for i, row in enumerate(grid) for d in row if d.process_index == jax.process_index()}
        out = {}
        for k, v in local.items():
            arr = np.asarray(v)
            shape = (arr.shape[0] * len(grid) // len(mine), *arr.shape[1:])
            out[k] = jax.make_array_from_process_local_data(self.sharded, arr, shape)
        return out


__all__ = ["AXES", "RULES", "LlamaPlacement"]
