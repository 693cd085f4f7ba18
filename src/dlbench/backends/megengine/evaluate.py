"""The independent evaluation's side of the MegEngine backend (#44): the case's model built anew from its
definition (models.build_model), the state dict a MegengineTrainer saved (megengine.save, its own format) loaded
strictly, batch normalisation's population statistics recomputed for them (precise_bn.py, through the shared
eval_forward.HeldOutForward), eval mode; held-out numpy batches in, the logits out as numpy. Nothing here touches
the training step (its loss, GradManager, optimizer, trace or data); MegEngine records no gradient outside a
GradManager. MegEngine's --converge is wired for its image classifiers (analysis/targets.py)."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import megengine as mge
import megengine.module as nn
import numpy as np
from megengine.module.batchnorm import _BatchNorm

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.megengine import cpu_device
from dlbench.backends.megengine.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.mge"


def save(model: nn.Module, folder: Path) -> None:
    """The model's state dict (parameters and batch norm's running statistics, as numpy) as folder/weights.mge."""
    mge.save(model.state_dict(), str(folder / WEIGHTS))


class Forward(HeldOutForward):
    """MegEngine's calls for the shared evaluation forward."""

    def __init__(self, case: Case, model: nn.Module) -> None:
        norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        super().__init__(case, model, norms)

    def keep_batch_statistics(self, norm: Any) -> None:
        norm.momentum = 0.0  # MegEngine's convention (the running statistic's weight): keep the batch's

    def statistics(self) -> list[Any]:
        return [t for n in self.norms for t in (n.running_mean, n.running_var)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target[...] = mge.tensor(value, device=target.device)  # in place, as MegEngine's batch_norm writes them

    def tensor(self, array: np.ndarray) -> mge.Tensor:
        return mge.tensor(array)

    def numpy(self, tensor: mge.Tensor) -> np.ndarray:
        return np.asarray(tensor.numpy(), np.float32)

    def no_grad(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()  # no GradManager attached: nothing is recorded


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved state dict, on the CPU in float32, in eval mode."""
    if case.task != "image_classification":
        raise NotImplementedError(f"MegEngine's evaluation forward is the image classifiers', not {case.task}")
    mge.set_default_device(cpu_device(spec.threads))
    model = build_model(case)
    model.load_state_dict(mge.load(str(weights / WEIGHTS)), strict=True)
    model.eval()
    return Forward(case, model)
