"""The independent evaluation's side of the Jittor backend (#44): the case's model built anew from its definition
(models.build_model, NCHW), the state dict a JittorTrainer saved (jt.save, Jittor's own pickle) loaded into it,
batch normalisation's population statistics recomputed for them (eval_forward.py, precise_bn.py), eval mode, no
gradients; held-out numpy batches in, the logits out as numpy. Nothing here touches the training step (its loss,
optimizer or data). Jittor's --converge is wired for its decoders and image classifiers (analysis/targets.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import jittor as jt
import numpy as np
from jittor import nn

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.jittor.models import build_model
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec

WEIGHTS = "weights.pkl"


def save(model: nn.Module, folder: Path) -> None:
    """The model's state dict (batch-norm statistics included) as float32 numpy arrays in folder/weights.pkl."""
    jt.save({k: np.asarray(v.float32().numpy()) for k, v in model.state_dict().items()}, str(folder / WEIGHTS))


class Forward(HeldOutForward):
    """Jittor's calls for the shared evaluation forward."""

    def __init__(self, case: Case, model: nn.Module) -> None:
        super().__init__(case, model, [m for m in model.modules() if isinstance(m, nn.BatchNorm)])

    def tensor(self, array: np.ndarray) -> jt.Var:
        return jt.array(array.astype(np.int32) if array.dtype.kind in "iu" else array)  # token ids int32, as trained

    def numpy(self, tensor: jt.Var) -> np.ndarray:
        return np.asarray(tensor.float32().numpy())

    def no_grad(self) -> AbstractContextManager[Any]:
        return jt.no_grad()

    def keep_batch_statistics(self, norm: Any) -> None:
        norm.momentum = 1.0  # a training-mode forward then keeps its batch's: r + (x - r) * 1, from r = 0 so that no
        for start in (norm.running_mean, norm.running_var):  # x is rounded to the scale of the initial variance (1)
            start.update(jt.zeros_like(start))

    def statistics(self) -> list[Any]:
        return [t for n in self.norms for t in (n.running_mean, n.running_var)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target.update(jt.array(value))


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved weights, on the CPU in float32, in eval mode (Jittor's load_parameters only
    warns about a name it cannot place: the names are checked here first)."""
    if case.loss.kind not in ("causal_lm", "softmax_ce"):
        raise NotImplementedError(f"jittor's evaluation forward is the decoders' and classifiers', not {case.task}")
    jt.flags.use_cuda = 0
    model = build_model(case, spec.input_size if isinstance(case.input, ImageInput) else None)
    saved, own = jt.load(str(weights / WEIGHTS)), model.state_dict()
    if set(saved) != set(own) or any(tuple(saved[k].shape) != tuple(own[k].shape) for k in own):
        raise RuntimeError(f"the saved weights do not fit the model: {sorted(set(own) ^ set(saved))[:3]}")
    model.load_parameters(saved)
    model.eval()
    return Forward(case, model)
