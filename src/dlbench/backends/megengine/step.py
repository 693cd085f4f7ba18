"""One native MegEngine train step (forward and loss under a GradManager, backward, optimizer step), eager or
traced (``--compile``: ``megengine.jit.trace(symbolic=True)`` of the whole step, optimizer included, compiled into
one static graph with static shapes on its first call; a point's batches all have one shape); while a convergence
curve is read, the window's loss summed on the device, and the weights saved for the evaluation (evaluate.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import megengine as mge
import megengine.module as nn
from megengine import optimizer as optim
from megengine.autodiff import GradManager
from megengine.jit import trace

from dlbench.backends.base import LossWindow, Trainer
from dlbench.backends.megengine.models import train_loss
from dlbench.cases import Case

Batch = dict[str, mge.Tensor]


def make_optimizer(case: Case, model: nn.Module, global_batch: int) -> optim.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (lr scaled by Optimizer.lr_for)."""
    o = case.optimizer
    params = list(model.parameters())
    lr = o.lr_for(global_batch)
    if o.name == "sgd":
        return optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return optim.AdamW(params, lr=lr, weight_decay=o.weight_decay)
    return optim.Adam(params, lr=lr, weight_decay=o.weight_decay)


class MegengineTrainer(Trainer):
    """Model, GradManager, optimizer and input on one device."""

    def __init__(
        self, case: Case, model: nn.Module, batches: Iterator[Batch], compile_model: bool, global_batch: int
    ) -> None:
        super().__init__(batches)
        self.case, self.model = case, model
        self.optimizer = make_optimizer(case, model, global_batch)
        self.gm = GradManager().attach(model.parameters())
        self.keys: tuple[str, ...] = ()
        step: Callable[..., mge.Tensor] = self._step
        self.step = trace(step, symbolic=True, symbolic_shape=False) if compile_model else step
        self._last: mge.Tensor | None = None
        self._window = LossWindow()  # the loss summed on the device since the last loss_window
        model.train()

    def _step(self, *tensors: mge.Tensor) -> mge.Tensor:
        """Forward, backward and update on the batch's tensors (positional, in self.keys order, as trace wants)."""
        batch = dict(zip(self.keys, tensors))
        with self.gm:
            loss = train_loss(self.case, self.model, batch)
            self.gm.backward(loss)
        self.optimizer.step().clear_grad()
        return loss

    def train_step(self, batch: Batch) -> None:
        if not self.keys:
            self.keys = tuple(sorted(batch))
        self._last = self.step(*(batch[k] for k in self.keys))
        if self.keep_loss_window:  # only while a convergence curve is read: a device add, no host read
            self._window.add(self._last)

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        return self._window.mean(lambda total: float(total.item()), self.loss)

    def save_weights(self, folder: Path) -> None:
        """The model's state dict in MegEngine's own format, for the independent evaluation (evaluate.py)."""
        from dlbench.backends.megengine import evaluate

        evaluate.save(self.model, folder)

    def sync(self) -> None:
        mge._full_sync()  # MegEngine queues ops asynchronously: wait for all of them

    def loss(self) -> float:
        return float(self._last.item()) if self._last is not None else float("nan")
