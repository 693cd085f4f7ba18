"""The independent evaluation's side of the Paddle backend (#44, #46): the case's model built anew from its
definition (models.build_model), the weights a PaddleTrainer saved (paddle.save of its state dict) loaded, eval
mode, no gradients; held-out numpy batches in, the decoder's logits out as numpy. Nothing here touches the training
step (its loss layer, optimizer, fleet wrappers or data). Paddle's --converge is wired for the decoders only
(analysis/targets.CONVERGE_TASKS), so this forward is the causal LM's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle

from dlbench.backends.paddle.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.pdparams"


def save(model: paddle.nn.Layer, folder: Path) -> None:
    """The model's state dict (float32 copies on the host) as folder/weights.pdparams."""
    state = {k: paddle.to_tensor(v.astype("float32").numpy()) for k, v in model.state_dict().items()}
    paddle.save(state, str(folder / WEIGHTS))


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The forward of a fresh decoder holding the saved weights, on the CPU in float32."""
    if case.loss.kind != "causal_lm":
        raise NotImplementedError(f"paddle's evaluation forward is the decoders' (causal_lm), not {case.task}")
    paddle.set_device("cpu")
    if spec.threads:
        paddle.base.core.set_num_threads(spec.threads)
    model = build_model(case)
    missing, unexpected = model.set_state_dict(paddle.load(str(weights / WEIGHTS)))
    if missing or unexpected:
        raise RuntimeError(f"the saved weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.eval()

    @paddle.no_grad()
    def forward(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        logits = model(paddle.to_tensor(np.ascontiguousarray(batch["input_ids"])))
        return {"logits": np.asarray(logits.astype("float32").numpy())}

    return forward
