"""One native Jittor train step (loss, then ``optimizer.step(loss)``: backward and update) on a fixed batch."""

from __future__ import annotations

import jittor as jt
import numpy as np
from jittor import nn

from dlbench.backends.base import Trainer
from dlbench.backends.jittor.models import train_loss
from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, input_size: int | None = None, seed: int = 0) -> list[jt.Var]:
    """One fixed batch: the model's inputs, then its labels (images float32, ids and labels int32)."""
    rng = np.random.default_rng(seed)
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        images = rng.standard_normal((batch, case.input.channels, side, side), dtype=np.float32)
        return [jt.array(images), jt.array(rng.integers(0, case.input.classes, batch).astype(np.int32))]
    assert isinstance(case.input, TextInput)
    seq = input_size or case.input.seq_len
    ids = rng.integers(0, case.input.vocab, (batch, seq))
    types = np.zeros((batch, seq))
    types[:, seq // 2:] = 1
    mlm = np.where(rng.random((batch, seq)) < case.input.mask_prob, ids, -100)
    arrays = [ids, types, np.ones((batch, seq)), mlm, rng.integers(0, 2, batch)]
    return [jt.array(a.astype(np.int32)) for a in arrays]


def make_optimizer(case: Case, model: nn.Module, global_batch: int) -> jt.optim.Optimizer:
    """The case's optimizer (lr from Optimizer.lr_for)."""
    o = case.optimizer
    params, lr = model.parameters(), o.lr_for(global_batch)
    if o.name == "sgd":
        return jt.optim.SGD(params, lr, momentum=o.momentum, weight_decay=o.weight_decay)
    return jt.optim.Adam(params, lr, weight_decay=o.weight_decay)


class JittorTrainer(Trainer):
    """A model, its optimizer and one batch."""

    def __init__(self, case: Case, model: nn.Module, batch: list[jt.Var], global_batch: int) -> None:
        self.case_name, self.model, self.batch = case.name, model, batch
        self.optimizer = make_optimizer(case, model, global_batch)
        self._last: jt.Var | None = None
        model.train()

    def step(self) -> None:
        loss = train_loss(self.case_name, self.model, self.batch)
        self.optimizer.step(loss)
        self._last = loss

    def sync(self) -> None:
        jt.sync_all(True)

    def loss(self) -> float:
        return float(self._last.item()) if self._last is not None else float("nan")
