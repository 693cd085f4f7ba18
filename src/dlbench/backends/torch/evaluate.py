"""The independent evaluation's side of the torch backend (#44): the case's model built anew from its definition
(models.build_model), the weights a TorchTrainer saved loaded, eval mode, no gradients; held-out numpy batches in,
the model's outputs out as numpy. Nothing here touches the training step (its loss, optimizer, scaler or data)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlbench.backends.torch.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "weights.pt"


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model under DistributedDataParallel / DataParallel and torch.compile's wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def save(model: torch.nn.Module, folder: Path) -> None:
    """The model's state dict, on the CPU, as folder/weights.pt."""
    state = {k: v.detach().to("cpu") for k, v in unwrapped(model).state_dict().items()}
    torch.save(state, folder / WEIGHTS)


def _batch_norms(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


class Forward:
    """The forward of a fresh model holding the saved weights; `calibrate` recomputes its batch normalisation's
    population statistics (dlbench/evaluate.py says why)."""

    def __init__(self, case: Case, model: torch.nn.Module, device: torch.device) -> None:
        self.case, self.model, self.device = case, model, device

    def _t(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    @torch.no_grad()
    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """The mean of the batch statistics over `batches` as each batch norm's running statistics, then eval."""
        norms = _batch_norms(self.model)
        if not norms:
            return
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: every batch counts the same
            m.train()
        for batch in batches:
            self.model(self._t(batch["images"]))
        self.model.eval()

    @torch.no_grad()
    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        t, model = self._t, self.model
        if self.case.loss.kind == "causal_lm":
            return {"logits": _out(model(t(batch["input_ids"])))}
        if self.case.loss.kind == "bce":
            return {"logit": _out(model(t(batch["dense"]), t(batch["deep_ids"]), t(batch["wide_ids"])))}
        if self.case.loss.kind == "mlm_nsp":
            mlm, nsp = model(
                t(batch["input_ids"]), t(batch["token_type_ids"]), t(batch["attention_mask"]), t(batch["mlm_positions"])
            )
            return {"mlm": _out(mlm), "nsp": _out(nsp)}
        logits = model(t(batch["images"]))
        return {"logits": _out(logits[0] if isinstance(logits, tuple) else logits)}


def _out(x: Any) -> np.ndarray:
    return np.asarray(x.detach().float().cpu().numpy())


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """The forward of a fresh model holding the saved weights (on the point's device, fp32, eval mode)."""
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = torch.device("cuda" if spec.device == "cuda" and torch.cuda.is_available() else "cpu")
    model = build_model(case)
    model.load_state_dict(torch.load(weights / WEIGHTS, map_location="cpu", weights_only=True))
    model.to(device).eval()
    return Forward(case, model, device)
