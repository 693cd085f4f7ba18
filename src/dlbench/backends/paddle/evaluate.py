"""The independent evaluation's side of the Paddle backend (#44, #46): the case's model built anew from its
definition (models.build_model, NCHW), the weights a PaddleTrainer saved (paddle.save of its state dict) loaded,
batch normalisation's population statistics recomputed for them (precise_bn.py), eval mode, no gradients; held-out
numpy batches in, the logits out as numpy. Nothing here touches the training step (its loss layer, optimizer, fleet
wrappers or data). Paddle's --converge is wired for its decoders and image classifiers (analysis/targets.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from dlbench.backends.eval_forward import HeldOutForward
from dlbench.backends.paddle.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.pdparams"


def save(model: paddle.nn.Layer, folder: Path) -> None:
    """The model's state dict (float32 copies on the host) as folder/weights.pdparams."""
    state = {k: paddle.to_tensor(v.astype("float32").numpy()) for k, v in model.state_dict().items()}
    paddle.save(state, str(folder / WEIGHTS))


class Forward(HeldOutForward):
    """Paddle's calls for the shared evaluation forward."""

    def __init__(self, case: Case, model: paddle.nn.Layer) -> None:
        norms = [m for m in model.sublayers() if isinstance(m, paddle.nn.layer.norm._BatchNormBase)]
        super().__init__(case, model, norms)

    def tensor(self, array: np.ndarray) -> paddle.Tensor:
        return paddle.to_tensor(array)

    def numpy(self, tensor: paddle.Tensor) -> np.ndarray:
        return np.asarray(tensor.astype("float32").numpy())

    def no_grad(self) -> AbstractContextManager[Any]:
        return paddle.no_grad()

    def keep_batch_statistics(self, norm: Any) -> None:
        norm._momentum = 0.0  # paddle's convention: a training-mode forward then keeps exactly its batch's

    def statistics(self) -> list[Any]:
        return [t for n in self.norms for t in (n._mean, n._variance)]

    def assign(self, target: Any, value: np.ndarray) -> None:
        target.set_value(value)


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model holding the saved weights, on the CPU in float32, in eval mode."""
    if case.loss.kind not in ("causal_lm", "softmax_ce"):
        raise NotImplementedError(f"paddle's evaluation forward is the decoders' and classifiers', not {case.task}")
    paddle.set_device("cpu")
    if spec.threads:
        paddle.base.core.set_num_threads(spec.threads)
    model = build_model(case)
    missing, unexpected = model.set_state_dict(paddle.load(str(weights / WEIGHTS)))
    if missing or unexpected:
        raise RuntimeError(f"the saved weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.eval()
    return Forward(case, model)
