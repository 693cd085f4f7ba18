"""DLRMv2 (DLRM-DCNv2, #47) in Flax: one table per sparse feature as a plain parameter, its multi-hot ids gathered
with ``jnp.take`` and summed (torch's ``EmbeddingBag`` mode sum), the bottom MLP, the low-rank DCNv2 cross layers
and the top MLP, laid out as the torch backend's dlrm.py. Trainable parameters: exactly
``dlbench.cases.dlrm.param_count``.

JAX has no sparse gradients: the gradient of a take is a dense table (XLA scatter-adds the looked-up rows into
zeros) and optax's Adagrad updates every row of every table, where torch's touches only the looked-up rows (its
zero-gradient rows would not move under Adagrad either, but their accumulators and weights are read and written);
the point's facts say so. Embedding sharding across ranks (table-wise) is wired for torch only; JAX's several
processes train data parallel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from itertools import pairwise
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from dlbench.cases import Case
from dlbench.cases.dlrm import dlrm_arch, interaction_width
from dlbench.data.recsys import PlantedClicks, roc_auc

EMBEDDING_PATH = "jnp.take over dense tables, sum-pooled; optax.adagrad updates every row (JAX has no sparse gradients)"
# torch's nn.Linear init: weights and biases uniform(+-1/sqrt(fan_in)) (the bias's fan-in read from its layer)
_TORCH_KERNEL = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def _table_init(rows: int) -> Callable[..., jax.Array]:
    """torchrec's table init: uniform(-sqrt(1/rows), sqrt(1/rows))."""
    bound = math.sqrt(1.0 / rows)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _bias_init(fan_in: int) -> Callable[..., jax.Array]:
    bound = 1.0 / math.sqrt(fan_in)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class Dlrm(nn.Module):
    """Dense features [B, 13] and ids [B, sum(hotness)] -> one logit per sample [B, 1]."""

    case: Case
    dtype: Any = jnp.float32

    def _mlp(self, x: jax.Array, widths: tuple[int, ...], prefix: str, last_activation: bool) -> jax.Array:
        for i, (fan_in, fan_out) in enumerate(pairwise(widths)):
            dense = partial(nn.Dense, kernel_init=_TORCH_KERNEL, bias_init=_bias_init(fan_in), dtype=self.dtype)
            x = dense(fan_out, name=f"{prefix}_{i}")(x)
            if last_activation or i < len(widths) - 2:
                x = nn.relu(x)
        return x

    @nn.compact
    def __call__(self, dense: jax.Array, ids: jax.Array, train: bool = True) -> jax.Array:
        a = dlrm_arch(self.case)
        n = interaction_width(a)
        x = self._mlp(dense.astype(self.dtype), (a.dense, *a.bottom), "bottom", last_activation=True)
        pooled, start = [], 0
        for f, (rows, hot) in enumerate(zip(a.rows, a.hotness, strict=True)):
            table = self.param(f"table_{f}", _table_init(rows), (rows, a.embedding))
            pooled.append(jnp.take(table, ids[:, start : start + hot], axis=0).sum(axis=1))
            start += hot
        z = jnp.concatenate([x, *(p.astype(self.dtype) for p in pooled)], axis=1)
        x0, xl = z, z
        xavier = nn.initializers.xavier_normal()
        for layer in range(a.cross_layers):
            w = self.param(f"cross_W_{layer}", xavier, (n, a.low_rank))
            v = self.param(f"cross_V_{layer}", xavier, (a.low_rank, n))
            b = self.param(f"cross_b_{layer}", nn.initializers.zeros, (n,))
            xl = x0 * ((xl @ v.T.astype(self.dtype)) @ w.T.astype(self.dtype) + b.astype(self.dtype)) + xl
        return self._mlp(xl, (n, *a.top), "top", last_activation=False).astype(jnp.float32)


def inputs(batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """The model's positional inputs from a DLRM batch."""
    return batch["dense"], batch["ids"]


def held_out_scorer(case: Case, apply: Callable[..., jax.Array], params: Callable[[], Any]) -> Callable[[], float]:
    """What a convergence curve reads at each reading: the model's AUC on the planted source's held-out set, with
    the trainer's current parameters (`params()`: this process's replica of them, so that several processes each
    score on their own device), in eval mode."""
    held = PlantedClicks(dlrm_arch(case)).held_out()
    dense, ids = jnp.asarray(held["dense"]), jnp.asarray(held["ids"].astype(np.int32))
    forward = jax.jit(lambda p: apply({"params": p}, dense, ids, train=False))

    def score() -> float:
        local = jax.tree_util.tree_map(lambda x: x.addressable_data(0), params())
        return roc_auc(np.asarray(forward(local)), held["labels"])

    return score


__all__ = ["EMBEDDING_PATH", "Dlrm", "held_out_scorer", "inputs"]
