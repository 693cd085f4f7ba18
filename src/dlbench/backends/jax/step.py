"""One jitted Flax train step, ``train_step(state, batch) -> (state, loss)``, and the Trainer around it.

The state's buffers are donated to the step (the old state is not kept alive); on fp16 (amp) flax's
DynamicScale scales the loss, and a step whose gradients overflowed changes nothing but the (lowered) scale."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from flax.training.dynamic_scale import DynamicScale

from dlbench.backends.base import AllocatorPeak, Trainer
from dlbench.backends.jax.distributed import Placement
from dlbench.backends.jax.models import model_inputs, train_loss
from dlbench.cases import Case
from dlbench.cases.lora import lora_of

Batch = dict[str, jax.Array]


class State(train_state.TrainState):
    """Flax TrainState plus BatchNorm statistics, the dropout key and (fp16 only) the dynamic loss scale."""

    batch_stats: Any
    key: jax.Array
    dynamic_scale: DynamicScale | None = None


def loss_scale(dtype: Any) -> DynamicScale | None:
    """flax's dynamic loss scale for float16 (None otherwise), its counters typed arrays from the start: flax's
    defaults are weak-typed Python numbers that the first step returns as strong int32/float32, so the jitted step
    would trace and compile again on step 2, inside the measured steps of a one-warm-up-step max-batch probe."""
    if dtype != jnp.float16:
        return None
    return DynamicScale(fin_steps=jnp.zeros((), jnp.int32), scale=jnp.asarray(2.0**16, jnp.float32))


def make_optimizer(case: Case, global_batch: int) -> optax.GradientTransformation:
    """The case's optimizer at its lr for this global batch, as torch's: SGD with momentum and Adam with the weight
    decay coupled (added to the gradient), AdamW with it decoupled (p -= lr x wd x p, outside the moments).

    AdamW was once Adam with the decay coupled: Adam then normalises the decay term with the gradient, so at GPT's
    and Llama's wd 0.1 every small-gradient weight is pulled to zero at about lr per step, and a causal LM on the
    --converge Markov source stalled at 3.6 nats and rose while torch's reached its target (#34)."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    if lora_of(case) is not None:  # LoRA (#47): only the adapters move; the frozen base gets no update
        return optax.multi_transform(
            {"train": optax.adamw(lr, weight_decay=o.weight_decay), "frozen": optax.set_to_zero()}, lora_labels
        )
    if o.name == "adamw":
        return optax.adamw(lr, weight_decay=o.weight_decay)
    if o.name == "adagrad":  # DLRM's, as torch's: no initial accumulator, its epsilon
        return optax.adagrad(lr, initial_accumulator_value=0.0, eps=o.eps or 1e-10)
    opt = optax.sgd(lr, momentum=o.momentum or None) if o.name == "sgd" else optax.adam(lr)
    return optax.chain(optax.add_decayed_weights(o.weight_decay), opt) if o.weight_decay else opt


def _loss_fn(case: Case, state: State, params: Any, batch: Batch, key: jax.Array) -> tuple[jax.Array, Any]:
    """(loss in fp32, new batch statistics) of the model on one batch in training mode."""
    variables = {"params": params, **({"batch_stats": state.batch_stats} if state.batch_stats else {})}
    out, updates = state.apply_fn(
        variables, *model_inputs(case, batch), train=True, mutable=["batch_stats"], rngs={"dropout": key}
    )
    return train_loss(case, out, batch), updates.get("batch_stats", state.batch_stats)


def lora_labels(params: Any) -> Any:
    """'train' for a LoRA adapter's parameter (a ``lora_`` module on its path), 'frozen' for every other."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "train" if any(str(getattr(k, "key", "")).startswith("lora_") for k in path) else "frozen",
        params,
    )


TrainStep = Callable[[State, Batch], tuple[State, jax.Array]]


def make_train_step(case: Case, placement: Placement, state_shardings: Any = None) -> TrainStep:
    """The jitted step: state replicated (or split as `state_shardings` says: tensor parallel) and batch sharded
    on the placement's mesh, so that on several devices XLA all-reduces the gradients; the state's buffers are
    donated, so the old state is not kept alive."""

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
        new = new.replace(
            params=keep(new.params, state.params),
            opt_state=keep(new.opt_state, state.opt_state),
            batch_stats=keep(new.batch_stats, state.batch_stats),
        )
        return new, loss

    rep = placement.replicated
    state = rep if state_shardings is None else state_shardings
    return jax.jit(train_step, in_shardings=(state, placement.sharded), out_shardings=(state, rep), donate_argnums=0)


class JaxTrainer(Trainer):
    """A train state on the placement's mesh (one device, or every process's) and its input, stepped by the
    jitted step; `device` is this process's own."""

    def __init__(self, batches: Iterator[Batch], state: State, step_fn: TrainStep, device: jax.Device) -> None:
        super().__init__(batches)
        self.state, self.step_fn, self.device = state, step_fn, device
        self._last: jax.Array | None = None
        self._window_sum: jax.Array | None = None  # the loss summed on the device since the last loss_window
        self._window_steps = 0
        self.scorer: Callable[[], float] | None = None  # a case judged by AUC: its held-out scorer (dlrm.py)

    def held_out_auc(self) -> float:
        if self.scorer is None:
            return super().held_out_auc()
        return self.scorer()

    def train_step(self, batch: Batch) -> None:
        self.state, self._last = self.step_fn(self.state, batch)
        if self.keep_loss_window:  # only while a convergence curve is read: no extra dispatch in timed steps
            # An asynchronous device add of the step's fp32 loss scalar: nothing waits for the step here.
            self._window_sum = self._last if self._window_sum is None else self._window_sum + self._last
            self._window_steps += 1

    def sync(self) -> None:
        jax.block_until_ready((self.state, self._last))

    def loss(self) -> float:
        return float(self._last) if self._last is not None else float("nan")

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read (it waits for the device) of a sum kept there."""
        if self._window_sum is None:
            return self.loss()
        mean = float(self._window_sum) / self._window_steps
        self._window_sum, self._window_steps = None, 0
        return mean

    def agree_steps(self, steps: int) -> int:
        """Rank 0's step count, broadcast to every process of the job by JAX's own collective; as is alone."""
        if jax.process_count() == 1:
            return steps
        from jax.experimental import multihost_utils

        return int(multihost_utils.broadcast_one_to_all(np.int32(steps)))

    def param_checksum(self) -> float:
        """A position-weighted float64 sum of every parameter, from this process's replica."""
        leaves = jax.tree_util.tree_leaves(self.state.params)
        return float(
            sum((i + 1) * np.asarray(leaf.addressable_data(0), dtype=np.float64).sum() for i, leaf in enumerate(leaves))
        )

    def allocator_peak(self) -> AllocatorPeak | None:
        return device_peak(self.device)

    def save_weights(self, folder: Path) -> None:
        """This process's replica of the variables, for the independent evaluation (backends/jax/evaluate.py)."""
        from dlbench.backends.jax import evaluate

        evaluate.save(self.state.params, self.state.batch_stats, folder)


def device_peak(device: jax.Device) -> AllocatorPeak | None:
    """XLA's allocator peak on the device (``peak_bytes_in_use``), where the device reports memory stats (a GPU;
    None on the CPU)."""
    if device.platform == "cpu":
        return None
    stats = device.memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return AllocatorPeak(int(peak), "jax_peak_bytes_in_use") if peak is not None else None
