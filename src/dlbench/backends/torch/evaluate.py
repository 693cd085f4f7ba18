"""The independent evaluation's side of the torch backend (#44): the case's model built anew from its definition
(models.build_model), the weights a TorchTrainer saved loaded, eval mode, no gradients; held-out numpy batches in,
the model's outputs out as numpy. Nothing here touches the training step (its loss, optimizer, scaler or data)."""

from __future__ import annotations

from collections.abc import Callable
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


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The forward of a fresh model holding the saved weights (on the point's device, fp32)."""
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = torch.device("cuda" if spec.device == "cuda" and torch.cuda.is_available() else "cpu")
    model = build_model(case)
    model.load_state_dict(torch.load(weights / WEIGHTS, map_location="cpu", weights_only=True))
    model.to(device).eval()
    for m in model.modules():  # batch statistics, as in training (dlbench/evaluate.py says why)
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.train()

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    def out(x: Any) -> np.ndarray:
        return np.asarray(x.detach().float().cpu().numpy())

    @torch.no_grad()
    def forward(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if case.loss.kind == "causal_lm":
            return {"logits": out(model(t(batch["input_ids"])))}
        if case.loss.kind == "bce":
            return {"logit": out(model(t(batch["dense"]), t(batch["deep_ids"]), t(batch["wide_ids"])))}
        if case.loss.kind == "mlm_nsp":
            mlm, nsp = model(
                t(batch["input_ids"]), t(batch["token_type_ids"]), t(batch["attention_mask"]), t(batch["mlm_positions"])
            )
            return {"mlm": out(mlm), "nsp": out(nsp)}
        logits = model(t(batch["images"]))
        return {"logits": out(logits[0] if isinstance(logits, tuple) else logits)}

    return forward
