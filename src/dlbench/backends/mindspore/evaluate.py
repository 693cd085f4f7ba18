"""The independent evaluation's side of the MindSpore backend (#44): the case's model built anew from its definition
(models.build_model, NCHW), the weights a MindsporeTrainer saved (MindSpore's own checkpoint, .ckpt) set into it by
name, batch normalisation's population statistics recomputed for them (eval_forward.py, precise_bn.py), inference
mode, in PyNative; held-out numpy batches in, the logits out as numpy. Nothing here touches the training step (its
loss Cell, optimizer, ms.jit graph or data). MindSpore's --converge is wired for its decoders and image classifiers
(analysis/targets.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.mindspore.models import build_model
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec

WEIGHTS = "weights.ckpt"


def save(model: nn.Cell, folder: Path) -> None:
    """The model's parameters (batch-norm statistics included), float32, named by their path in the model, as
    folder/weights.ckpt."""
    named = [{"name": n, "data": p.astype(ms.float32)} for n, p in model.parameters_and_names()]
    ms.save_checkpoint(named, str(folder / WEIGHTS))


class Forward(HeldOutForward):
    """MindSpore's calls for the shared evaluation forward."""

    def __init__(self, case: Case, model: nn.Cell) -> None:
        norms = [c for _, c in model.cells_and_names() if isinstance(c, nn.BatchNorm2d)]
        super().__init__(case, model, norms)

    def tensor(self, array: np.ndarray) -> Tensor:
        return Tensor(array.astype(np.int32) if array.dtype.kind in "iu" else array)  # token ids as the step has them

    def numpy(self, tensor: Tensor) -> np.ndarray:
        return np.asarray(tensor.astype(ms.float32).asnumpy())

    def no_grad(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()  # PyNative records nothing for gradients outside ms.value_and_grad

    def keep_batch_statistics(self, norm: Any) -> None:
        # ops.BatchNorm's momentum is torch's (the layer passes 1 - its own): 1 keeps exactly this batch's statistics.
        norm.bn_train = ops.BatchNorm(is_training=True, epsilon=norm.eps, momentum=1.0, data_format=norm.format)

    def statistics(self) -> list[Any]:
        return [t for n in self.norms for t in (n.moving_mean, n.moving_variance)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target.set_data(Tensor(value))

    @contextlib.contextmanager
    def calibrating(self) -> Iterator[None]:
        """The shared context with MindSpore's mode switch (its Cells have set_train, not train/eval)."""
        for norm in self.norms:
            self.keep_batch_statistics(norm)
            norm.set_train(True)
        yield  # PyNative records nothing for gradients outside ms.value_and_grad
        self.model.set_train(False)


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved weights, in float32, in inference mode (on MindSpore's default target)."""
    if case.loss.kind not in ("causal_lm", "softmax_ce"):
        raise NotImplementedError(f"mindspore's evaluation forward is the decoders' and classifiers', not {case.task}")
    model = build_model(case, spec.input_size if isinstance(case.input, ImageInput) else None)
    params, saved = dict(model.parameters_and_names()), ms.load_checkpoint(str(weights / WEIGHTS))
    if set(params) != set(saved):
        raise RuntimeError(f"the saved weights do not fit the model: {sorted(set(params) ^ set(saved))[:3]}")
    for name, param in params.items():
        param.set_data(Tensor(saved[name].asnumpy(), dtype=param.dtype))
    model.set_train(False)
    return Forward(case, model)
