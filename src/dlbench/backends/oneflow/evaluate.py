"""The independent evaluation's side of the OneFlow backend (#44, #46): the case's model built anew from its
definition (models.build_model), the weights a OneflowTrainer saved (its state dict as float32 numpy arrays) copied
in, eval mode, no gradients; held-out numpy batches in, the decoder's logits out as numpy. Nothing here touches the
training step (its loss, optimizer, DDP wrapper or data). OneFlow's --converge is wired for the decoders only
(analysis/targets.CONVERGE_TASKS), so this forward is the causal LM's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import oneflow as flow

from dlbench.backends.oneflow.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.npz"


def save(model: flow.nn.Module, folder: Path) -> None:
    """The model's state dict (under a DDP wrapper's), float32 on the host, as folder/weights.npz."""
    inner = getattr(model, "module", model)
    np.savez(folder / WEIGHTS, **{k: v.numpy().astype(np.float32) for k, v in inner.state_dict().items()})


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The forward of a fresh decoder holding the saved weights, on the CPU in float32."""
    if case.loss.kind != "causal_lm":
        raise NotImplementedError(f"oneflow's evaluation forward is the decoders' (causal_lm), not {case.task}")
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

    def forward(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with flow.no_grad():
            logits = model(flow.tensor(np.ascontiguousarray(batch["input_ids"])))
        return {"logits": np.asarray(logits.numpy(), np.float32)}

    return forward
