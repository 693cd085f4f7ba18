"""One native Gluon train step (record, backward, Trainer.step) on a synthetic batch made once on the device."""

from __future__ import annotations

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from dlbench.backends.base import Trainer
from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, ctx: mx.Context, input_size: int | None = None,
                    seed: int = 0) -> list[mx.nd.NDArray]:
    """One fixed batch, as the model's positional inputs followed by its labels (float32, as Gluon takes them)."""
    rng = np.random.default_rng(seed)
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        images = rng.standard_normal((batch, case.input.channels, side, side), dtype=np.float32)
        labels = rng.integers(0, case.input.classes, batch)
        arrays = [images, labels]
    else:
        assert isinstance(case.input, TextInput)
        seq = input_size or case.input.seq_len
        ids = rng.integers(0, case.input.vocab, (batch, seq))
        types = np.zeros((batch, seq))
        types[:, seq // 2:] = 1
        mask = np.ones((batch, seq))
        mlm = np.where(rng.random((batch, seq)) < case.input.mask_prob, ids, -100)
        arrays = [ids, types, mask, mlm, rng.integers(0, 2, batch)]
    return [mx.nd.array(a, ctx=ctx, dtype="float32") for a in arrays]


def make_trainer(case: Case, net: gluon.Block, global_batch: int) -> gluon.Trainer:
    """A Gluon Trainer with the case's optimizer (lr from Optimizer.lr_for), updating locally."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    if o.name == "sgd":
        return gluon.Trainer(net.collect_params(), "sgd",
                             {"learning_rate": lr, "momentum": o.momentum, "wd": o.weight_decay}, kvstore=None)
    return gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr, "wd": o.weight_decay}, kvstore=None)


class MxnetTrainer(Trainer):
    """A loss-computing Gluon block, its Trainer and one batch on one context."""

    def __init__(self, case: Case, net: gluon.HybridBlock, batch: list[mx.nd.NDArray], global_batch: int) -> None:
        self.net, self.batch = net, batch
        self.trainer = make_trainer(case, net, global_batch)
        self._last: mx.nd.NDArray | None = None

    def step(self) -> None:
        with autograd.record():
            loss = self.net(*self.batch)
        loss.backward()
        self.trainer.step(1)  # the loss is already a batch mean
        self._last = loss

    def sync(self) -> None:
        mx.nd.waitall()

    def loss(self) -> float:
        return float(self._last.astype("float32").asscalar()) if self._last is not None else float("nan")
