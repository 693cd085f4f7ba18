"""One native PyTorch train step (forward, loss, backward, optimizer step), with AMP and torch.compile."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from dlbench.backends.base import Trainer
from dlbench.backends.torch.distributed import GradSync, param_checksum
from dlbench.backends.torch.models import train_loss
from dlbench.cases import Case


def make_optimizer(case: Case, model: torch.nn.Module, global_batch: int) -> torch.optim.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (lr scaled by Optimizer.lr_for)."""
    o = case.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    lr = o.lr_for(global_batch)
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)
    return torch.optim.Adam(params, lr=lr, weight_decay=o.weight_decay)


class TorchTrainer(Trainer):
    """Model, optimizer and one batch on one device."""

    def __init__(self, case: Case, model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device,
                 precision: str, compile_model: bool, sync: GradSync | None = None,
                 global_batch: int | None = None) -> None:
        self.case, self.model, self.batch, self.device = case, model, batch, device
        self.sync_grads = sync or GradSync()  # the gradient strategy on several devices
        self.optimizer = make_optimizer(case, model, global_batch or next(iter(batch.values())).shape[0])
        self.amp_dtype = {"fp32": None, "bf16": torch.bfloat16,
                          "amp": torch.float16 if device.type == "cuda" else torch.bfloat16}[precision]
        self.scaler = torch.amp.GradScaler("cuda") if (precision == "amp" and device.type == "cuda") else None
        self._last: torch.Tensor | None = None
        forward: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor] = (
            lambda m, b: train_loss(case.name, m, b))
        self.forward = torch.compile(forward) if compile_model else forward
        model.train()

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.forward(self.model, self.batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.sync_grads.update(self._scaled_step)
        else:
            loss.backward()
            self.sync_grads.update(self.optimizer.step)
        self._last = loss.detach()

    def _scaled_step(self) -> None:
        assert self.scaler is not None
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def param_checksum(self) -> float:
        """Compared across ranks after the timed steps (dlbench.launch.ranks.ChecksumTrainer)."""
        return param_checksum(self.model)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss(self) -> float:
        return float(self._last.float().item()) if self._last is not None else float("nan")

    def peak_memory_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return None
