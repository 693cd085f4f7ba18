"""The independent evaluation's side of the JAX backend (#44): the case's flax module built anew from its definition
(models.build_module, fp32), the variables a JaxTrainer saved (flax's msgpack) restored, the forward applied to
held-out numpy batches, the outputs back as numpy. Nothing here touches the training step (its loss, optimizer,
loss scale or data). Batch normalisation's population statistics are recomputed for these weights (`calibrate`, as
torch's evaluator does; dlbench/evaluate.py says why); every other module infers (no dropout)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from dlbench.backends.jax.models import build_module, model_inputs
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "variables.msgpack"


def save(params: Any, batch_stats: Any, folder: Path) -> None:
    """This process's replica of the parameters (and batch statistics) as folder/variables.msgpack."""
    variables = {"params": params, **({"batch_stats": batch_stats} if batch_stats else {})}
    host = jax.tree_util.tree_map(lambda x: np.asarray(x.addressable_data(0), dtype=np.float32), variables)
    (folder / WEIGHTS).write_bytes(serialization.msgpack_serialize(host))


def _host(case: Case, batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """A held-out batch as the JAX models take it: NHWC images, int32 ids."""
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if k == "images":
            out[k] = jnp.asarray(np.transpose(v, (0, 2, 3, 1)))
        elif np.issubdtype(v.dtype, np.integer):
            out[k] = jnp.asarray(v.astype(np.int32))
        else:
            out[k] = jnp.asarray(v)
    return out


BN_MOMENTUM = 0.9  # the flax BatchNorm's (models.py): a batch's statistics enter its averages times 1 - this


class Forward:
    """The forward of a fresh module holding the saved variables; `calibrate` recomputes its batch normalisation's
    population statistics (dlbench/evaluate.py says why)."""

    def __init__(self, case: Case, module: Any, variables: dict[str, Any]) -> None:
        self.case, self.variables = case, variables
        self._apply = jax.jit(lambda v, *inputs: module.apply(v, *inputs, train=False))
        # From zero averages, one training-mode batch leaves (1 - momentum) x its own statistics in them.
        self._stats = jax.jit(lambda v, *inputs: module.apply(v, *inputs, train=True, mutable=["batch_stats"])[1])

    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """The mean of the batch statistics over `batches` as the module's averages."""
        if "batch_stats" not in self.variables:
            return
        zero = {**self.variables, "batch_stats": jax.tree_util.tree_map(jnp.zeros_like, self.variables["batch_stats"])}
        total, count = None, 0
        for batch in batches:
            stats = self._stats(zero, *model_inputs(self.case, _host(self.case, batch)))["batch_stats"]
            total = stats if total is None else jax.tree_util.tree_map(jnp.add, total, stats)
            count += 1
        if total is not None:
            scale = 1.0 / (count * (1.0 - BN_MOMENTUM))
            self.variables = {**self.variables, "batch_stats": jax.tree_util.tree_map(lambda x: x * scale, total)}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self._apply(self.variables, *model_inputs(self.case, _host(self.case, batch)))
        if self.case.loss.kind == "mlm_nsp":
            mlm, nsp = out
            return {"mlm": np.asarray(mlm, np.float32), "nsp": np.asarray(nsp, np.float32)}
        if self.case.loss.kind == "bce":
            return {"logit": np.asarray(out, np.float32).reshape(-1)}
        logits = out[0] if isinstance(out, tuple) else out
        return {"logits": np.asarray(logits, np.float32)}


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """The forward of a fresh module holding the saved variables (on this process's CPU or first device, fp32)."""
    variables = serialization.msgpack_restore((weights / WEIGHTS).read_bytes())
    return Forward(case, build_module(case), dict(variables))
