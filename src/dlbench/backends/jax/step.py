"""One jitted Flax train step, ``train_step(state, batch) -> (state, loss)``, and the Trainer around it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from flax.training.dynamic_scale import DynamicScale

from dlbench.backends.base import Trainer
from dlbench.backends.jax.bert import mlm_nsp_loss
from dlbench.backends.jax.distributed import Placement
from dlbench.cases import Case

Batch = dict[str, jax.Array]
AUX_WEIGHT = 0.4  # Inception v3's auxiliary loss, as in the torch backend


class State(train_state.TrainState):
    """Flax TrainState plus BatchNorm statistics, the dropout key and (fp16 only) the dynamic loss scale."""

    batch_stats: Any
    key: jax.Array
    dynamic_scale: DynamicScale | None = None


def make_optimizer(case: Case, global_batch: int) -> optax.GradientTransformation:
    """The case's optimizer at its lr for this global batch: SGD with momentum or Adam (coupled weight decay)."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    opt = optax.sgd(lr, momentum=o.momentum or None) if o.name == "sgd" else optax.adam(lr)
    return optax.chain(optax.add_decayed_weights(o.weight_decay), opt) if o.weight_decay else opt


def _loss_fn(case: Case, state: State, params: Any, batch: Batch, key: jax.Array) -> tuple[jax.Array, Any]:
    """(loss in fp32, new batch statistics) of the model on one batch in training mode."""
    variables = {"params": params, **({"batch_stats": state.batch_stats} if state.batch_stats else {})}
    if case.task == "bert_pretraining":
        mlm, nsp = state.apply_fn(variables, batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                  train=True, rngs={"dropout": key})
        return mlm_nsp_loss(mlm, nsp, batch["mlm_labels"], batch["nsp_labels"]), state.batch_stats
    out, updates = state.apply_fn(variables, batch["images"], train=True, mutable=["batch_stats"],
                                  rngs={"dropout": key})
    ce = optax.softmax_cross_entropy_with_integer_labels
    if isinstance(out, tuple):  # Inception v3: (logits, aux_logits)
        logits, aux = out
        loss = ce(logits.astype(jnp.float32), batch["labels"]).mean()
        loss = loss + AUX_WEIGHT * ce(aux.astype(jnp.float32), batch["labels"]).mean()
    else:
        loss = ce(out.astype(jnp.float32), batch["labels"]).mean()
    return loss, updates.get("batch_stats", state.batch_stats)


TrainStep = Callable[[State, Batch], tuple[State, jax.Array]]


def make_train_step(case: Case, placement: Placement) -> TrainStep:
    """The jitted step: state replicated and batch sharded on the placement's mesh, so that on several devices
    XLA all-reduces the gradients; the state's buffers are donated, so the old state is not kept alive."""

    def train_step(state: State, batch: Batch) -> tuple[State, jax.Array]:
        key = jax.random.fold_in(state.key, state.step)
        fn = partial(_loss_fn, case, state, batch=batch, key=key)
        if state.dynamic_scale is None:
            (loss, stats), grads = jax.value_and_grad(fn, has_aux=True)(state.params)
            return state.apply_gradients(grads=grads, batch_stats=stats), loss
        scale, finite, (loss, stats), grads = state.dynamic_scale.value_and_grad(fn, has_aux=True)(state.params)
        new = state.apply_gradients(grads=grads, batch_stats=stats, dynamic_scale=scale)
        keep = partial(jax.tree_util.tree_map, partial(jnp.where, finite))
        # An overflowed fp16 step changes nothing but the (lowered) loss scale.
        new = new.replace(params=keep(new.params, state.params), opt_state=keep(new.opt_state, state.opt_state),
                          batch_stats=keep(new.batch_stats, state.batch_stats))
        return new, loss

    rep = placement.replicated
    return jax.jit(train_step, in_shardings=(rep, placement.sharded), out_shardings=(rep, rep), donate_argnums=0)


class JaxTrainer(Trainer):
    """A train state and one batch on the placement's mesh (one device, or every process's), stepped by the
    jitted train_step; `device` is this process's own."""

    def __init__(self, state: State, batch: Batch, train_step: TrainStep, device: jax.Device) -> None:
        self.state, self.batch, self.train_step, self.device = state, batch, train_step, device
        self._last: jax.Array | None = None

    def step(self) -> None:
        self.state, self._last = self.train_step(self.state, self.batch)

    def sync(self) -> None:
        jax.block_until_ready((self.state, self._last))

    def loss(self) -> float:
        return float(self._last) if self._last is not None else float("nan")

    def param_checksum(self) -> float:
        """A position-weighted float64 sum of every parameter, from this process's replica (ChecksumTrainer)."""
        leaves = jax.tree_util.tree_leaves(self.state.params)
        return float(sum((i + 1) * np.asarray(leaf.addressable_data(0), dtype=np.float64).sum()
                         for i, leaf in enumerate(leaves)))

    def peak_memory_bytes(self) -> int | None:
        if self.device.platform == "cpu":
            return None
        stats = self.device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return int(peak) if peak is not None else None
