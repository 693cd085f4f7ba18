"""The independent evaluation's side of the Paddle backend (#44, #46): the case's model built anew from its
definition (models.build_model, NCHW), the weights a PaddleTrainer saved (paddle.save of its state dict) loaded,
batch normalisation's population statistics recomputed for them (precise_bn.py), eval mode, no gradients; held-out
numpy batches in, the logits out as numpy. Nothing here touches the training step (its loss layer, optimizer, fleet
wrappers or data). Paddle's --converge is wired for its decoders and image classifiers (analysis/targets.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import paddle

from dlbench.backends.paddle.models import build_model
from dlbench.backends.precise_bn import average_batch_statistics
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.pdparams"


def save(model: paddle.nn.Layer, folder: Path) -> None:
    """The model's state dict (float32 copies on the host) as folder/weights.pdparams."""
    state = {k: paddle.to_tensor(v.astype("float32").numpy()) for k, v in model.state_dict().items()}
    paddle.save(state, str(folder / WEIGHTS))


class Forward:
    """The forward of a fresh model holding the saved weights (a decoder's or an image classifier's)."""

    def __init__(self, case: Case, model: paddle.nn.Layer) -> None:
        self.case, self.model = case, model
        self.norms = [m for m in model.sublayers() if isinstance(m, paddle.nn.layer.norm._BatchNormBase)]

    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """Each batch norm's averages: the mean of the calibration batches' own statistics."""
        if not self.norms:
            return
        for norm in self.norms:
            norm._momentum = 0.0  # paddle's convention: a training-mode forward then keeps exactly its batch's
            norm.train()

        def read() -> list[np.ndarray]:
            return [t.numpy() for n in self.norms for t in (n._mean, n._variance)]

        def write(stats: list[np.ndarray]) -> None:
            for t, s in zip((t for n in self.norms for t in (n._mean, n._variance)), stats, strict=True):
                t.set_value(s)

        with paddle.no_grad():
            average_batch_statistics(batches, lambda b: self.model(paddle.to_tensor(b["images"])), read, write)
        self.model.eval()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = "input_ids" if self.case.loss.kind == "causal_lm" else "images"
        with paddle.no_grad():
            out = self.model(paddle.to_tensor(np.ascontiguousarray(batch[key])))
        logits = out[0] if isinstance(out, (list, tuple)) else out
        return {"logits": np.asarray(logits.astype("float32").numpy())}


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
