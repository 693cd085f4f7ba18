"""One native MegEngine train step (forward and loss under a GradManager, backward, optimizer step), eager or
traced (``--compile``: ``megengine.jit.trace(symbolic=True)`` of the whole step, optimizer included, compiled into
one static graph with static shapes on its first call; a point's batches all have one shape)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import megengine as mge
import megengine.module as nn
from megengine import optimizer as optim
from megengine.autodiff import GradManager
from megengine.jit import trace

from dlbench.backends.base import Trainer
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

    def sync(self) -> None:
        mge._full_sync()  # MegEngine queues ops asynchronously: wait for all of them

    def loss(self) -> float:
        return float(self._last.item()) if self._last is not None else float("nan")
