"""One native Jittor train step (loss, then ``optimizer.step(loss)``: backward and update) on a batch from the
point's input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jittor as jt
from jittor import nn

from dlbench.backends.base import LossWindow, Trainer
from dlbench.backends.jittor.models import train_loss
from dlbench.cases import Case

Batch = list[jt.Var]


def make_optimizer(case: Case, model: nn.Module, global_batch: int) -> jt.optim.Optimizer:
    """The case's optimizer (lr from Optimizer.lr_for): SGD, Adam (weight decay as an L2 term), or AdamW (decoupled
    weight decay, as torch's: the decoders' recipe)."""
    o = case.optimizer
    params, lr = model.parameters(), o.lr_for(global_batch)
    if o.name == "sgd":
        return jt.optim.SGD(params, lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return jt.optim.AdamW(params, lr, weight_decay=o.weight_decay)
    return jt.optim.Adam(params, lr, weight_decay=o.weight_decay)


class JittorTrainer(Trainer):
    """A model, its optimizer and its input. No allocator peak: Jittor's allocators keep none (the worker
    samples NVML for a GPU point)."""

    def __init__(self, case: Case, model: nn.Module, batches: Iterator[Batch], global_batch: int) -> None:
        super().__init__(batches)
        self.case, self.model = case, model
        self.optimizer = make_optimizer(case, model, global_batch)
        self._last: jt.Var | None = None
        self._window = LossWindow()  # the loss summed (a lazy Var, on the device) since the last loss_window
        model.train()

    def train_step(self, batch: Batch) -> None:
        loss = train_loss(self.case, self.model, batch)
        self.optimizer.step(loss)
        self._last = loss
        if self.keep_loss_window:  # only while a convergence curve is read
            self._window.add(loss)

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        return self._window.mean(lambda total: float(total.item()), self.loss)

    def save_weights(self, folder: Path) -> None:
        """The model's state dict (jt.save, Jittor's own pickle), for the independent evaluation (evaluate.py)."""
        from dlbench.backends.jittor import evaluate

        evaluate.save(self.model, folder)

    def sync(self) -> None:
        jt.sync_all(True)

    def loss(self) -> float:
        return float(self._last.item()) if self._last is not None else float("nan")
