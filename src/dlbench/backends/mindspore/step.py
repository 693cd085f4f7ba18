"""One native MindSpore train step (value_and_grad, then the optimizer), PyNative or compiled with ms.jit."""

from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from dlbench.backends.base import Trainer
from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, input_size: int | None = None, seed: int = 0) -> list[Tensor]:
    """One fixed batch: the model's inputs, then its labels (images float32, ids and labels int32)."""
    rng = np.random.default_rng(seed)
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        images = rng.standard_normal((batch, case.input.channels, side, side), dtype=np.float32)
        return [Tensor(images), Tensor(rng.integers(0, case.input.classes, batch).astype(np.int32))]
    assert isinstance(case.input, TextInput)
    seq = input_size or case.input.seq_len
    ids = rng.integers(0, case.input.vocab, (batch, seq))
    types = np.zeros((batch, seq))
    types[:, seq // 2:] = 1
    mlm = np.where(rng.random((batch, seq)) < case.input.mask_prob, ids, -100)
    arrays = [ids, types, np.ones((batch, seq)), mlm, rng.integers(0, 2, batch)]
    return [Tensor(a.astype(np.int32)) for a in arrays]


def make_optimizer(case: Case, net: nn.Cell, global_batch: int) -> nn.Optimizer:
    """The case's optimizer (lr from Optimizer.lr_for)."""
    o = case.optimizer
    params, lr = net.trainable_params(), o.lr_for(global_batch)
    if o.name == "sgd":
        return nn.Momentum(params, lr, o.momentum, weight_decay=o.weight_decay)
    return nn.Adam(params, learning_rate=lr, weight_decay=o.weight_decay)


class MindsporeTrainer(Trainer):
    """A loss-computing Cell, its optimizer and one batch; compiled=True runs the step as one ms.jit graph."""

    def __init__(self, case: Case, net: nn.Cell, batch: list[Tensor], global_batch: int, compiled: bool) -> None:
        self.batch = batch
        net.set_train(True)
        optimizer = make_optimizer(case, net, global_batch)
        grad_fn = ms.value_and_grad(net, None, optimizer.parameters)

        def train_step(*inputs: Tensor) -> Tensor:
            loss, grads = grad_fn(*inputs)
            optimizer(grads)
            return loss

        self._step: Callable[..., Tensor] = ms.jit(train_step) if compiled else train_step
        self._tail = optimizer.parameters[-1]  # the optimizer's last update, in MindSpore's in-order CPU pipeline
        self._last: Tensor | None = None

    def step(self) -> None:
        self._last = self._step(*self.batch)

    def sync(self) -> None:
        # ms.runtime.synchronize() serves Ascend and GPU only; on the CPU, reading the loss and the last
        # updated parameter to the host waits for the step's queued kernels.
        if self._last is not None:
            self._last.asnumpy()
        self._tail.asnumpy()

    def loss(self) -> float:
        return float(self._last.asnumpy()) if self._last is not None else float("nan")
