"""One native MindSpore train step (value_and_grad, then the optimizer), PyNative or compiled with ms.jit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import mindspore as ms
from mindspore import Tensor, nn
from mindspore.experimental.optim import AdamW

from dlbench.backends.base import AllocatorPeak, LossWindow, Trainer
from dlbench.cases import Case

Batch = list[Tensor]


def make_optimizer(case: Case, net: nn.Cell, global_batch: int) -> nn.Cell:
    """The case's optimizer (lr from Optimizer.lr_for). AdamW is mindspore.experimental.optim.AdamW, torch's
    (decoupled decay, bias-corrected moments): nn.AdamWeightDecay corrects no bias, and mint.optim.AdamW has no
    CPU kernel in MindSpore 2.10."""
    o = case.optimizer
    params, lr = net.trainable_params(), o.lr_for(global_batch)
    if o.name == "sgd":
        return nn.Momentum(params, lr, o.momentum, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return AdamW(params, lr=lr, weight_decay=o.weight_decay)
    return nn.Adam(params, learning_rate=lr, weight_decay=o.weight_decay)


class MindsporeTrainer(Trainer):
    """A loss-computing Cell, its optimizer and its input; compiled=True runs the step as one ms.jit graph."""

    def __init__(
        self,
        case: Case,
        net: nn.Cell,
        batches: Iterator[Batch],
        global_batch: int,
        compiled: bool,
        device_sync: bool = False,
    ) -> None:
        super().__init__(batches)
        self.device_sync = device_sync
        self.net = net  # the loss Cell around the model
        net.set_train(True)
        optimizer = make_optimizer(case, net, global_batch)
        params = net.trainable_params()
        grad_fn = ms.value_and_grad(net, None, params)

        def train_step(*inputs: Tensor) -> Tensor:
            loss, grads = grad_fn(*inputs)
            optimizer(grads)
            return loss

        self._step: Callable[..., Tensor] = ms.jit(train_step) if compiled else train_step
        self._tail = params[-1]  # the optimizer's last update, in MindSpore's in-order CPU pipeline
        self._last: Tensor | None = None
        self._window = LossWindow()  # the loss summed on the device since the last loss_window

    def train_step(self, batch: Batch) -> None:
        self._last = self._step(*batch)
        if self.keep_loss_window:  # only while a convergence curve is read
            self._window.add(self._last)

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        return self._window.mean(lambda total: float(total.asnumpy()), self.loss)

    def save_weights(self, folder: Path) -> None:
        """The model's parameters (outside its loss Cell) as a MindSpore checkpoint, for the independent evaluation
        of a --converge point (evaluate.py)."""
        from dlbench.backends.mindspore import evaluate

        evaluate.save(self.net.model, folder)

    def sync(self) -> None:
        if self.device_sync:
            ms.runtime.synchronize()
            return
        # ms.runtime.synchronize() serves Ascend and GPU only; on the CPU, reading the loss and the last
        # updated parameter to the host waits for the step's queued kernels.
        if self._last is not None:
            self._last.asnumpy()
        self._tail.asnumpy()

    def loss(self) -> float:
        return float(self._last.asnumpy()) if self._last is not None else float("nan")

    def allocator_peak(self) -> AllocatorPeak | None:
        """MindSpore's device memory pool peak on a GPU (None on the CPU: the worker measures the process)."""
        if not self.device_sync:
            return None
        return AllocatorPeak(int(ms.runtime.max_memory_allocated()), "mindspore_max_memory_allocated")
