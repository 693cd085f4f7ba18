"""One native OneFlow train step (forward, loss, backward, optimizer step), eager or as an ``oneflow.nn.Graph``
(``--compile``: the whole step, optimizer included, compiled into one static graph on its first call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import oneflow as flow
from oneflow import nn

from dlbench.backends.base import Trainer
from dlbench.backends.oneflow.models import train_loss
from dlbench.cases import Case

Batch = dict[str, flow.Tensor]


def make_optimizer(case: Case, model: nn.Module, global_batch: int) -> flow.optim.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (lr scaled by Optimizer.lr_for)."""
    o = case.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    lr = o.lr_for(global_batch)
    if o.name == "sgd":
        return flow.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return flow.optim.AdamW(params, lr=lr, weight_decay=o.weight_decay)
    return flow.optim.Adam(params, lr=lr, weight_decay=o.weight_decay)


class TrainGraph(nn.Graph):
    """The train step as a static graph: forward, loss, backward and the optimizer update."""

    def __init__(self, case: Case, model: nn.Module, optimizer: flow.optim.Optimizer) -> None:
        super().__init__()
        self.case, self.model = case, model
        self.add_optimizer(optimizer)

    def build(self, batch: Batch) -> flow.Tensor:
        loss = train_loss(self.case, self.model, batch)
        loss.backward()
        return loss


class OneflowTrainer(Trainer):
    """Model, optimizer and input on one device (a DDP-wrapped model on several)."""

    def __init__(
        self,
        case: Case,
        model: nn.Module,
        batches: Iterator[Batch],
        device: flow.device,
        compile_model: bool,
        global_batch: int,
        checksum: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(batches)
        self.case, self.model, self.device = case, model, device
        self.optimizer = make_optimizer(case, model, global_batch)
        self.graph = TrainGraph(case, model, self.optimizer) if compile_model else None
        self._checksum = checksum
        self._last: flow.Tensor | None = None
        self._window: flow.Tensor | None = None  # the loss summed on the device since the last loss_window
        self._window_steps = 0
        model.train()

    def train_step(self, batch: Batch) -> None:
        if self.graph is not None:
            self._last = self.graph(batch)
            return
        self.optimizer.zero_grad()
        loss = train_loss(self.case, self.model, batch)
        loss.backward()
        self.optimizer.step()
        self._last = loss.detach()
        if self.keep_loss_window:  # only while a convergence curve is read: a device add, no host read
            self._window = self._last if self._window is None else self._window + self._last
            self._window_steps += 1

    def loss_window(self) -> float:
        """The mean loss since the last call (eager steps): one host read of a sum kept on the device."""
        if self._window is None:
            return self.loss()
        mean = float(self._window.numpy()) / self._window_steps
        self._window, self._window_steps = None, 0
        return mean

    def sync(self) -> None:
        # OneFlow's eager ops (CPU ones too) run asynchronously on its virtual machine: wait for every queued op.
        flow._oneflow_internal.eager.Sync()
        if self.device.type == "cuda":
            flow.cuda.synchronize()

    def loss(self) -> float:
        return float(self._last.numpy()) if self._last is not None else float("nan")

    def save_weights(self, folder: Path) -> None:
        """The model's state dict, for the independent evaluation of a --converge point (evaluate.py)."""
        from dlbench.backends.oneflow import evaluate

        evaluate.save(self.model, folder)

    def param_checksum(self) -> float | None:
        return self._checksum() if self._checksum is not None else None
