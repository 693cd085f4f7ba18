"""One native Gluon train step (record, backward, Trainer.step) on a batch from the point's input; while a
convergence curve is read, the window's loss summed on the device, and the model's weights saved for the
independent evaluation (evaluate.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mxnet as mx
from mxnet import autograd, gluon

from dlbench.backends.base import AllocatorPeak, LossWindow, Trainer
from dlbench.cases import Case

Batch = list[mx.nd.NDArray]


def make_trainer(case: Case, net: gluon.Block, global_batch: int) -> gluon.Trainer:
    """A Gluon Trainer with the case's optimizer (lr from Optimizer.lr_for), updating locally."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    if o.name == "sgd":
        return gluon.Trainer(
            net.collect_params(),
            "sgd",
            {"learning_rate": lr, "momentum": o.momentum, "wd": o.weight_decay},
            kvstore=None,
        )
    return gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr, "wd": o.weight_decay}, kvstore=None)


class MxnetTrainer(Trainer):
    """A loss-computing Gluon block, its Trainer and its input on one context."""

    def __init__(
        self, case: Case, net: gluon.HybridBlock, batches: Iterator[Batch], ctx: mx.Context, global_batch: int
    ) -> None:
        super().__init__(batches)
        self.net, self.ctx = net, ctx
        self.trainer = make_trainer(case, net, global_batch)
        self._last: mx.nd.NDArray | None = None
        self._window = LossWindow()  # the loss summed on the device since the last loss_window

    def train_step(self, batch: Batch) -> None:
        with autograd.record():
            loss = self.net(*batch)
        loss.backward()
        self.trainer.step(1)  # the loss is already a batch mean
        self._last = loss
        if self.keep_loss_window:  # only while a convergence curve is read: a device add, no host read
            self._window.add(loss.astype("float32", copy=True))  # a copy: a hybridized block may reuse its output

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        return self._window.mean(lambda total: float(total.asscalar()), self.loss)

    def save_weights(self, folder: Path) -> None:
        """The model's parameters (Gluon's own .params file), for the independent evaluation (evaluate.py)."""
        from dlbench.backends.mxnet import evaluate

        evaluate.save(self.net.model, folder)

    def sync(self) -> None:
        mx.nd.waitall()

    def loss(self) -> float:
        return float(self._last.astype("float32").asscalar()) if self._last is not None else float("nan")

    def allocator_peak(self) -> AllocatorPeak | None:
        """None: MXNet 1.9's pooled GPU allocator exposes no peak (the worker samples NVML for a GPU point)."""
        return None
