"""Wide & Deep in Flax: the embedding tables are plain parameters read with `jnp.take`, trained with optax's Adam.
JAX has no sparse-gradient path: the gradient of a take is a dense table (XLA scatter-adds the rows a batch
touched into zeros) and Adam updates every row, so `sparse` 1 and 0 train the same way here; the facts say so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

from dlbench.cases import Case
from dlbench.cases.wide_deep import wide_deep_arch

EMBEDDING_PATH = "jnp.take over dense tables; optax.adam updates every row (JAX has no sparse gradients)"


def _uniform(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    """OneFlow-WDL's table initialiser: uniform(-0.05, 0.05)."""
    return jax.random.uniform(key, shape, dtype, -0.05, 0.05)


class WideDeep(nn.Module):
    """The wide table (vocab x 1, summed over the wide ids) plus the deep part (vocab x e embeddings of the
    categorical ids with the dense features, through ReLU + dropout layers to one logit)."""

    case: Case
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, dense: jax.Array, deep_ids: jax.Array, wide_ids: jax.Array, train: bool = True) -> jax.Array:
        a = wide_deep_arch(self.case)
        wide = self.param("wide", _uniform, (a.vocab, 1))
        deep = self.param("deep", _uniform, (a.vocab, a.embedding))
        logit_wide = jnp.take(wide, wide_ids, axis=0).sum(axis=1)
        x = jnp.concatenate([jnp.take(deep, deep_ids, axis=0).reshape(deep_ids.shape[0], -1), dense], axis=1)
        x = x.astype(self.dtype)
        for h in a.hidden:
            x = nn.Dropout(a.dropout, deterministic=not train)(nn.relu(nn.Dense(h, dtype=self.dtype)(x)))
        return logit_wide + nn.Dense(1, dtype=self.dtype)(x).astype(jnp.float32)


def inputs(batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """The model's positional inputs from a click-through batch."""
    return batch["dense"], batch["deep_ids"], batch["wide_ids"]


def bce_loss(logits: jax.Array, batch: Mapping[str, Any]) -> jax.Array:
    """Mean sigmoid binary cross-entropy, in float32."""
    return optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), batch["labels"]).mean()


__all__ = ["EMBEDDING_PATH", "WideDeep", "bce_loss", "inputs"]
