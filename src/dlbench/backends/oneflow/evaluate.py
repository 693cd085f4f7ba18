"""The independent evaluation's side of the OneFlow backend (#44, #46): the case's model built anew from its
definition (models.build_model), the weights a OneflowTrainer saved (its state dict as float32 numpy arrays) copied
in, batch normalisation's population statistics recomputed for them (precise_bn.py), eval mode, no gradients;
held-out numpy batches in, the logits out as numpy. Nothing here touches the training step (its loss, optimizer,
DDP wrapper or data). OneFlow's --converge is wired for its decoders and image classifiers (analysis/targets.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import oneflow as flow

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.oneflow.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.npz"


def save(model: flow.nn.Module, folder: Path) -> None:
    """The model's state dict (under a DDP wrapper's), float32 on the host, as folder/weights.npz."""
    inner = getattr(model, "module", model)
    np.savez(folder / WEIGHTS, **{k: v.numpy().astype(np.float32) for k, v in inner.state_dict().items()})


class Forward(HeldOutForward):
    """OneFlow's calls for the shared evaluation forward."""

    def __init__(self, case: Case, model: flow.nn.Module) -> None:
        norms = [m for m in model.modules() if isinstance(m, flow.nn.modules.batchnorm._BatchNorm)]
        super().__init__(case, model, norms)

    def tensor(self, array: np.ndarray) -> flow.Tensor:
        return flow.tensor(array)

    def numpy(self, tensor: flow.Tensor) -> np.ndarray:
        return np.asarray(tensor.numpy(), np.float32)

    def no_grad(self) -> AbstractContextManager[Any]:
        return flow.no_grad()

    def keep_batch_statistics(self, norm: Any) -> None:
        norm.momentum = 1.0  # torch's convention: a training-mode forward then keeps exactly its batch's

    def statistics(self) -> list[Any]:
        return [t for n in self.norms for t in (n.running_mean, n.running_var)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target.copy_(flow.tensor(value))


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved weights, on the CPU in float32, in eval mode."""
    if case.loss.kind not in ("causal_lm", "softmax_ce"):
        raise NotImplementedError(f"oneflow's evaluation forward is the decoders' and classifiers', not {case.task}")
    if spec.threads:
        flow.set_num_threads(spec.threads)
    model = build_model(case)
    state, saved = model.state_dict(), np.load(weights / WEIGHTS)
    if set(state) != set(saved.files):
        raise RuntimeError(f"the saved weights do not fit the model: {sorted(set(state) ^ set(saved.files))[:3]}")
    with flow.no_grad():
        for name, target in state.items():
            target.copy_(flow.tensor(saved[name], dtype=target.dtype))
    model.eval()
    return Forward(case, model)
