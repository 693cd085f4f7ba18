"""Run in the JAX environment: MLPerf's two workloads (#47) in JAX on one CPU device. LoRA on llama_tiny: the
trainable count, an adapted model's first output equal to its base's (B is zero), and two steps that move only
the adapters; DLRM tiny: the count, a falling loss, and the held-out AUC scorer. Prints one JSON line."""

from __future__ import annotations

import json

PARAMS = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128, "seq": 8, "lora": 4}


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dlbench.backends.jax import data
    from dlbench.backends.jax.backend import JaxBackend, make_state
    from dlbench.backends.jax.distributed import Placement
    from dlbench.backends.jax.dlrm import held_out_scorer
    from dlbench.backends.jax.step import lora_labels, make_train_step
    from dlbench.cases import get_case

    jax.config.update("jax_default_matmul_precision", "highest")
    device = jax.devices()[0]
    where = Placement.over([device])
    out: dict[str, object] = {}
    lora = get_case("llama_tiny").configured({**PARAMS, "lora_dropout": 0})
    base = get_case("llama_tiny").configured({**PARAMS, "lora": 0})
    out["lora_count"] = JaxBackend().count_params(lora)
    batch = data.synthetic_arrays(lora, 4, None, 7)
    state = make_state(lora, jnp.float32, None, 0, device, 4)
    base_state = make_state(base, jnp.float32, None, 0, device, 4)
    logits = state.apply_fn({"params": state.params}, batch["input_ids"], train=False)
    flat = {  # the base's parameters: the same names, the adapters left out
        k: {n: w for n, w in blk.items() if not n.startswith("lora_")} if isinstance(blk, dict) else blk
        for k, blk in state.params.items()
    }
    base_logits = base_state.apply_fn({"params": flat}, batch["input_ids"], train=False)
    out["starts_at_base"] = float(jnp.max(jnp.abs(logits - base_logits)))
    step = make_train_step(lora, where)
    before = jax.tree_util.tree_map(np.asarray, state.params)
    losses = []
    for _ in range(2):
        state, loss = step(state, where.shard(batch))
        losses.append(float(loss))
    labels = jax.tree_util.tree_leaves(lora_labels(state.params))
    moved = [
        (t, bool(np.any(np.asarray(a) != b)))
        for t, a, b in zip(labels, jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(before))
    ]
    out["frozen_moved"] = sum(m for t, m in moved if t == "frozen")
    out["adapters_moved"] = sum(m for t, m in moved if t == "train")
    dlrm = get_case("dlrm_tiny")
    out["dlrm_count"] = JaxBackend().count_params(dlrm)
    d_state = make_state(dlrm, jnp.float32, None, 0, device, 64)
    d_step = make_train_step(dlrm, where)
    d_batch = where.shard(data.synthetic_arrays(dlrm, 64, None, 3))
    d_losses = []
    for _ in range(5):
        d_state, loss = d_step(d_state, d_batch)
        d_losses.append(float(loss))
    out["dlrm_losses"] = d_losses
    out["dlrm_auc"] = held_out_scorer(dlrm, d_state.apply_fn, lambda: d_state.params)()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
