"""The independent evaluation's side of the JAX backend (#44): the case's flax module built anew from its definition
(models.build_module, fp32), the variables a JaxTrainer saved (flax's msgpack) restored, the forward applied to
held-out numpy batches, the outputs back as numpy. Nothing here touches the training step (its loss, optimizer,
loss scale or data). Batch normalisation uses each held-out batch's own statistics, as torch's evaluator does
(dlbench/evaluate.py says why); every other module infers (no dropout)."""

from __future__ import annotations

from collections.abc import Callable
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


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The forward of a fresh module holding the saved variables (on this process's CPU or first device, fp32)."""
    module = build_module(case)
    variables = serialization.msgpack_restore((weights / WEIGHTS).read_bytes())
    batch_norm = "batch_stats" in variables

    @jax.jit
    def apply(v: Any, *inputs: Any) -> Any:
        if batch_norm:  # the batch's own statistics, as in training
            out, _ = module.apply(v, *inputs, train=True, mutable=["batch_stats"])
            return out
        return module.apply(v, *inputs, train=False)

    def forward(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = apply(variables, *model_inputs(case, _host(case, batch)))
        if case.loss.kind == "mlm_nsp":
            mlm, nsp = out
            return {"mlm": np.asarray(mlm, np.float32), "nsp": np.asarray(nsp, np.float32)}
        if case.loss.kind == "bce":
            return {"logit": np.asarray(out, np.float32).reshape(-1)}
        logits = out[0] if isinstance(out, tuple) else out
        return {"logits": np.asarray(logits, np.float32)}

    return forward
