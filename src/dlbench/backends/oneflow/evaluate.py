"""The independent evaluation's side of the OneFlow backend (#44, #46): the case's model built anew from its
definition (models.build_model), the weights a OneflowTrainer saved (its state dict as float32 numpy arrays) copied
in, batch normalisation's population statistics recomputed for them (precise_bn.py), eval mode, no gradients;
held-out numpy batches in, the logits out as numpy. Nothing here touches the training step (its loss, optimizer,
DDP wrapper or data). OneFlow's --converge is wired for its decoders and image classifiers (analysis/targets.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import oneflow as flow

from dlbench.backends.oneflow.models import build_model
from dlbench.backends.precise_bn import average_batch_statistics
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.npz"


def save(model: flow.nn.Module, folder: Path) -> None:
    """The model's state dict (under a DDP wrapper's), float32 on the host, as folder/weights.npz."""
    inner = getattr(model, "module", model)
    np.savez(folder / WEIGHTS, **{k: v.numpy().astype(np.float32) for k, v in inner.state_dict().items()})


class Forward:
    """The forward of a fresh model holding the saved weights (a decoder's or an image classifier's)."""

    def __init__(self, case: Case, model: flow.nn.Module) -> None:
        self.case, self.model = case, model
        self.norms = [m for m in model.modules() if isinstance(m, flow.nn.modules.batchnorm._BatchNorm)]

    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """Each batch norm's running statistics: the mean of the calibration batches' own."""
        if not self.norms:
            return
        for norm in self.norms:
            norm.momentum = 1.0  # torch's convention: a training-mode forward then keeps exactly its batch's
            norm.train()

        def read() -> list[np.ndarray]:
            return [t.numpy() for n in self.norms for t in (n.running_mean, n.running_var)]

        def write(stats: list[np.ndarray]) -> None:
            for t, s in zip((t for n in self.norms for t in (n.running_mean, n.running_var)), stats, strict=True):
                t.copy_(flow.tensor(s))

        with flow.no_grad():
            average_batch_statistics(batches, lambda b: self.model(flow.tensor(b["images"])), read, write)
        self.model.eval()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = "input_ids" if self.case.loss.kind == "causal_lm" else "images"
        with flow.no_grad():
            out = self.model(flow.tensor(np.ascontiguousarray(batch[key])))
        logits = out[0] if isinstance(out, (list, tuple)) else out
        return {"logits": np.asarray(logits.numpy(), np.float32)}


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
