"""One native PyTorch train step (forward, loss, backward, optimizer step), with autocast, loss scaling and
torch.compile; and the CUDA-event timer of each step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from dlbench.backends.base import AllocatorPeak, Trainer
from dlbench.backends.torch import evaluate
from dlbench.backends.torch.distributed import GradSync, param_checksum
from dlbench.backends.torch.models import train_loss
from dlbench.backends.torch.wide_deep import optimizer_for
from dlbench.cases import Case
from dlbench.numerics import LOSS_SCALE_INIT, Numerics

Batch = dict[str, torch.Tensor]
AMP_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def grad_scaler(device_type: str) -> torch.amp.GradScaler:
    """Dynamic loss scaling from LOSS_SCALE_INIT (dlbench.numerics), not torch's 2^16: a short warm-up then updates
    the weights from its first step instead of skipping steps while the scale comes down."""
    return torch.amp.GradScaler(device_type, init_scale=LOSS_SCALE_INIT)


def make_optimizer(case: Case, model: torch.nn.Module, global_batch: int, fused: bool) -> torch.optim.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (lr scaled by Optimizer.lr_for); on a GPU the fused
    implementation (one kernel for every parameter, and a GradScaler step without a host read), its state
    initialised before the first step (`prime_state`)."""
    o = case.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    lr = o.lr_for(global_batch)
    split = optimizer_for(model, lr, fused)  # sparse embedding tables need a sparse-aware optimizer
    if split is not None:
        return split
    use = True if fused else None  # None: torch's default (foreach where it can)
    if o.name == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay, fused=use
        )
    elif o.name == "adagrad":  # DLRM's: sparse table gradients and dense ones alike (no fused kernel)
        opt = torch.optim.Adagrad(params, lr=lr, weight_decay=o.weight_decay, eps=o.eps or 1e-10)
    elif o.name == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=o.weight_decay, fused=use)
    else:
        opt = torch.optim.Adam(params, lr=lr, weight_decay=o.weight_decay, fused=use)
    return prime_state(opt)


def prime_state(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """SGD's momentum buffers as zeros before the first step, so that no step is the one that creates them.

    Fused SGD creates them with `empty_like` inside its first step and, when a GradScaler found an inf or a NaN
    there, returns before writing them: the next step then adds momentum x uninitialised memory to the weights.
    A zero buffer makes the first real step's update momentum x 0 + grad = grad, torch's own first step (which
    copies the gradient) for dampening 0, fused or not; a skipped step leaves it zero. Adam and AdamW need
    nothing: they create zeros and count their step on the device, which the fused kernels leave as they were
    on an overflow."""
    for group in optimizer.param_groups:
        if "momentum" not in group or group["momentum"] == 0:
            continue
        if group.get("dampening", 0) != 0:
            raise ValueError("prime_state: SGD with dampening updates its first step differently; dlbench uses none")
        for p in group["params"]:
            optimizer.state[p].setdefault("momentum_buffer", torch.zeros_like(p, memory_format=torch.preserve_format))
    return optimizer


class CudaStepTimer:
    """CUDA events around each step, on the current stream: the device's own time per step."""

    kind = "cuda_events"

    def __init__(self) -> None:
        self.pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def start(self) -> None:
        self.pairs.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
        self.pairs[-1][0].record()

    def stop(self) -> None:
        self.pairs[-1][1].record()

    def read(self) -> tuple[float, ...]:
        out = tuple(a.elapsed_time(b) / 1000.0 for a, b in self.pairs)
        self.pairs = []
        return out


class TorchTrainer(Trainer):
    """Model, optimizer and input on one device."""

    def __init__(
        self,
        case: Case,
        model: torch.nn.Module,
        batches: Iterator[Batch],
        device: torch.device,
        numerics: Numerics,
        compile_model: bool,
        global_batch: int,
        sync: GradSync | None = None,
        fused: bool | None = None,
    ) -> None:
        super().__init__(batches)
        self.case, self.model, self.device = case, model, device
        self.sync_grads = sync or GradSync()  # the gradient strategy on several devices
        # Fused optimizers on a GPU (`fused` asks for them elsewhere: torch has CPU kernels too, which tests use).
        self.fused = device.type == "cuda" if fused is None else fused
        self.optimizer = make_optimizer(case, model, global_batch, fused=self.fused)
        self.amp_dtype = AMP_DTYPES.get(numerics.compute_dtype)
        self.scaler = grad_scaler(device.type) if numerics.loss_scaling else None
        self._last: torch.Tensor | None = None
        self._window_sum: torch.Tensor | None = None  # the loss summed on the device since the last loss_window
        self._window_steps = 0
        self.scorer: Callable[[], float] | None = None  # a case judged by AUC: its held-out scorer (dlrm.py)

        def forward(m: torch.nn.Module, b: Batch) -> torch.Tensor:
            return train_loss(case, m, b)

        self.forward = torch.compile(forward) if compile_model else forward
        model.train()

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def train_step(self, batch: Batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.forward(self.model, batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.sync_grads.update(self._scaled_step)
        else:
            loss.backward()
            self.sync_grads.update(self.optimizer.step)
        self._last = loss.detach()
        if self.keep_loss_window:  # only while a convergence curve is read: no extra kernel in timed steps
            last = self._last.float()
            self._window_sum = last if self._window_sum is None else self._window_sum + last  # no host read
            self._window_steps += 1

    def _scaled_step(self) -> None:
        assert self.scaler is not None
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def param_checksum(self) -> float:
        return param_checksum(self.model)

    def agree_steps(self, steps: int) -> int:
        """Rank 0's step count, broadcast over the process group (on the GPU with NCCL); as is on one rank."""
        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return steps
        on = self.device if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
        count = torch.tensor([steps], dtype=torch.int64, device=on)
        torch.distributed.broadcast(count, src=0)
        return int(count.item())

    def replica_checksums(self) -> list[float]:
        """dp keeps one copy, on GPU 0 (DataParallel replicates it afresh every step)."""
        return [param_checksum(self.model)]

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss(self) -> float:
        return float(self._last.float().item()) if self._last is not None else float("nan")

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        if self._window_sum is None:
            return self.loss()
        mean = float((self._window_sum / self._window_steps).item())
        self._window_sum, self._window_steps = None, 0
        return mean

    def held_out_auc(self) -> float:
        if self.scorer is None:
            return super().held_out_auc()
        return self.scorer()

    def save_weights(self, folder: Path) -> None:
        """The whole model's state dict (a split model's rank holds a part: refused by the worker before this)."""
        evaluate.save(self.model, folder)

    def allocator_peak(self) -> AllocatorPeak | None:
        if self.device.type == "cuda":
            return AllocatorPeak(int(torch.cuda.max_memory_allocated(self.device)), "torch_max_allocated")
        return None

    def step_timer(self) -> CudaStepTimer | None:
        return CudaStepTimer() if self.device.type == "cuda" else None
