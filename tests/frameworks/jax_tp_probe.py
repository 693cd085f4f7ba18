"""Run in the JAX environment with XLA_FLAGS=--xla_force_host_platform_device_count=4: the JAX backend's GPT on
one device and tensor parallel over a (data, model) mesh of the 4 host devices (2x2 and 1x4), from the same
weights on the same global batch; prints one JSON line {layout: [loss per step], ...}."""

from __future__ import annotations

import dataclasses
import json

PARAMS = {"heads": 4, "hidden": 64, "layers": 2, "seq": 32, "vocab": 1000}


def main() -> None:
    import jax
    import jax.numpy as jnp

    from dlbench.backends.jax import data
    from dlbench.backends.jax.backend import make_state
    from dlbench.backends.jax.distributed import Placement
    from dlbench.backends.jax.step import make_train_step
    from dlbench.backends.jax.tensor_parallel import TensorPlacement, checksum
    from dlbench.cases import get_case
    from dlbench.parallel import Layout

    jax.config.update("jax_default_matmul_precision", "highest")
    case = get_case("gpt").configured(PARAMS)
    case = dataclasses.replace(case, arch=dataclasses.replace(case.arch, dropout=0.0))
    batch = data.synthetic_arrays(case, 8, None, 7)
    devices = jax.devices()
    out: dict[str, object] = {"devices": len(devices)}
    for name, layout in (("one", None), ("2x2", Layout(2, 2)), ("1x4", Layout(1, 4))):
        state = make_state(case, jnp.float32, None, 0, devices[0], 8, recompute=layout is not None)
        if layout is None:
            where = Placement.over(devices[:1])
            state, step = where.replicate(state), make_train_step(case, where)
        else:
            where = TensorPlacement.of(devices, layout)
            state = where.replicate(state)
            step = make_train_step(case, where, where.state_shardings(state))
            out[f"{name}_qkv"] = str(state.params["block_0"]["qkv"]["kernel"].sharding.spec)
        losses = []
        for _ in range(3):
            state, loss = step(state, where.shard(batch))
            losses.append(float(loss))
        out[name] = losses
        if layout is not None:
            out[f"{name}_checksum"] = checksum(state.params, where)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
