"""The independent evaluation's side of the MXNet backend (#44): the case's Gluon model built anew from its
definition (models.build_model), the parameters an MxnetTrainer saved (Gluon's own .params file) loaded on the
CPU, batch normalisation's population statistics recomputed for them (precise_bn.py, through the shared
eval_forward.HeldOutForward), then the forward in predict mode on held-out numpy batches. Nothing here touches the
training step (its loss block, Gluon Trainer, kvstore or data). MXNet's --converge is wired for its image
classifiers (analysis/targets.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon import HybridBlock, nn

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.mxnet.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "model.params"


def save(model: HybridBlock, folder: Path) -> None:
    """The model's parameters (trainable ones and batch norm's running statistics) as folder/model.params."""
    model.save_parameters(str(folder / WEIGHTS))


class Forward(HeldOutForward):
    """MXNet's calls for the shared evaluation forward. Gluon's layers carry no train/eval mode (autograd's
    train_mode and predict_mode are the process's), and MXNet's batch norm writes its batch's statistics into its
    running ones in its backward pass, not its forward: each calibration batch is a recorded forward and a
    backward (gradients that nothing applies)."""

    def __init__(self, case: Case, model: HybridBlock) -> None:
        norms: list[nn.BatchNorm] = []
        model.apply(lambda block: norms.append(block) if isinstance(block, nn.BatchNorm) else None)
        super().__init__(case, model, norms)

    @contextmanager
    def calibrating(self) -> Iterator[None]:
        for norm in self.norms:
            self.keep_batch_statistics(norm)
        yield  # the model's mode is the autograd scope's: predict mode again outside calibration_forward

    def calibration_forward(self, batch: dict[str, np.ndarray]) -> None:
        with autograd.record():  # training mode: each batch norm normalises by its batch's statistics
            out = self.model(self.tensor(batch["images"]))
        out.backward()  # where MXNet's batch norm keeps them

    def keep_batch_statistics(self, norm: Any) -> None:
        norm._kwargs["momentum"] = 0.0  # MXNet's convention (the running statistic's weight): keep the batch's

    def statistics(self) -> list[Any]:
        return [p.data() for n in self.norms for p in (n.running_mean, n.running_var)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target[:] = value

    def tensor(self, array: np.ndarray) -> mx.nd.NDArray:
        return mx.nd.array(array, ctx=mx.cpu(), dtype="float32")

    def numpy(self, tensor: mx.nd.NDArray) -> np.ndarray:
        return np.asarray(tensor.astype("float32").asnumpy())

    def no_grad(self) -> AbstractContextManager[Any]:
        return autograd.predict_mode()


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved parameters, on the CPU in float32 (any name or shape that differs fails)."""
    if case.task != "image_classification":
        raise NotImplementedError(f"MXNet's evaluation forward is the image classifiers', not {case.task}")
    model = build_model(case, spec.input_size)
    model.load_parameters(str(weights / WEIGHTS), ctx=mx.cpu())
    return Forward(case, model)
