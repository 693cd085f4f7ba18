"""One native Jittor train step (loss, then ``optimizer.step(loss)``: backward and update) on a batch from the
point's input."""

from __future__ import annotations

from collections.abc import Iterator

import jittor as jt
from jittor import nn

from dlbench.backends.base import Trainer
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
        model.train()

    def train_step(self, batch: Batch) -> None:
        loss = train_loss(self.case, self.model, batch)
        self.optimizer.step(loss)
        self._last = loss

    def sync(self) -> None:
        jt.sync_all(True)

    def loss(self) -> float:
        return float(self._last.item()) if self._last is not None else float("nan")
