"""The base a JAX LoRA point fine-tunes under --converge (#47): the Llama pretrained by cases/lora.py's recipe on
the unshifted Markov chain (JAX's own training, from seed 0), cached per shape in dlbench's cache folder, and put
into the trainer's frozen parameters (the adapters keep their init). One process: a multi-process LoRA point
converges from its random base."""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.backends.jax.models import build_module, train_loss
from dlbench.backends.jax.step import JaxTrainer
from dlbench.cases import Case, get_case
from dlbench.cases.llama import OPTIMIZER
from dlbench.cases.lora import PRETRAIN_LR, PRETRAIN_STEPS, base_key
from dlbench.data.learnable import pretraining_batches
from dlbench.paths import cache_dir


def _key(path: tuple[Any, ...]) -> str:
    return "/".join(str(getattr(k, "key", k)) for k in path)


def _pretrain(case: Case, input_size: int | None, device: jax.Device) -> dict[str, np.ndarray]:
    """The base (LoRA off) trained from seed 0 by the recipe: its parameters by path."""
    base = get_case(case.name).configured({**dict(case.values), "lora": 0})
    module = build_module(base)
    stream = pretraining_batches(base, input_size)
    first = next(stream)
    with jax.default_device(device):
        params = module.init(jax.random.PRNGKey(0), jnp.asarray(first["input_ids"], jnp.int32), train=True)["params"]
        tx = optax.adamw(PRETRAIN_LR, weight_decay=OPTIMIZER.weight_decay)
        opt_state = tx.init(params)

        @jax.jit
        def step(params: Any, opt_state: Any, ids: jax.Array, labels: jax.Array) -> tuple[Any, Any]:
            def loss_fn(p: Any) -> jax.Array:
                return train_loss(base, module.apply({"params": p}, ids, train=True), {"labels": labels})

            grads = jax.grad(loss_fn)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        batch = first
        for _ in range(PRETRAIN_STEPS):
            params, opt_state = step(params, opt_state, jnp.asarray(batch["input_ids"], jnp.int32), batch["labels"])
            batch = next(stream)
    flat, _ = jax.tree_util.tree_flatten_with_path(params)
    return {_key(path): np.asarray(leaf) for path, leaf in flat}


def load_pretrained(trainer: JaxTrainer, case: Case, input_size: int | None, device: jax.Device) -> str:
    """Put the pretrained base (from the cache, else trained now and cached) into the trainer's frozen parameters;
    what was done, for the point's facts."""
    path = cache_dir("lora-base") / f"{base_key(case, 'jax', input_size)}.npz"
    made = not path.is_file()
    if made:
        weights = _pretrain(case, input_size, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.npz")
        np.savez(partial, **weights)  # type: ignore[arg-type]
        os.replace(partial, path)
    with np.load(path) as stored:
        weights = {k: stored[k] for k in stored.files}

    def put(p: tuple[Any, ...], leaf: jax.Array) -> jax.Array:
        key = _key(p)
        return jax.device_put(jnp.asarray(weights[key]), leaf.sharding) if key in weights else leaf

    params = jax.tree_util.tree_map_with_path(put, trainer.state.params)
    trainer.state = trainer.state.replace(params=params)
    how = "pretrained now and cached" if made else "read from the cache"
    return f"{how}: {PRETRAIN_STEPS} AdamW steps on the unshifted Markov chain ({path.name})"


__all__ = ["load_pretrained"]
