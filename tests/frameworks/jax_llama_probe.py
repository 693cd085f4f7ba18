"""Run in the JAX environment with XLA_FLAGS=--xla_force_host_platform_device_count=4: the JAX Llama on one device
and over (data, fsdp, tensor) meshes of the 4 host devices, from the same weights on the same global batch; prints
one JSON line {mesh: [loss per step], ...} and how the query kernel and its Adam moment were sharded."""

from __future__ import annotations

import json

PARAMS = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128, "seq": 8, "tied": 0}
MESHES = {
    "data4": (4, 1, 1),
    "fsdp4": (1, 4, 1),
    "tensor4": (1, 1, 4),
    "fsdp2_tensor2": (1, 2, 2),
    "data2_tensor2": (2, 1, 2),
    "data2_fsdp2": (2, 2, 1),
}


def main() -> None:
    import jax
    import jax.numpy as jnp

    from dlbench.backends.jax import data
    from dlbench.backends.jax.backend import count_leaves, make_state
    from dlbench.backends.jax.distributed import Placement
    from dlbench.backends.jax.llama_mesh import LlamaPlacement
    from dlbench.backends.jax.step import make_train_step
    from dlbench.cases import get_case

    jax.config.update("jax_default_matmul_precision", "highest")
    case = get_case("llama_tiny").configured(PARAMS)
    batch = data.synthetic_arrays(case, 8, None, 7)
    devices = jax.devices()
    out: dict[str, object] = {"devices": len(devices)}
    for name, mesh in (("one", None), *MESHES.items()):
        state = make_state(case, jnp.float32, None, 0, devices[0], 8)
        if mesh is None:
            out["params"] = count_leaves(state.params)
            where = Placement.over(devices[:1])
            state, step = where.replicate(state), make_train_step(case, where)
        else:
            where = LlamaPlacement.of(devices, *mesh)
            state = where.replicate(state)
            step = make_train_step(case, where, where.state_shardings(state))
            out[f"{name}_wq"] = str(state.params["block_0"]["wq"]["kernel"].sharding.spec)
        global_batch = where.shard(batch)
        losses = []
        for _ in range(3):
            state, loss = step(state, global_batch)
            losses.append(float(loss))
        out[name] = losses
    print(json.dumps(out))


if __name__ == "__main__":
    main()
