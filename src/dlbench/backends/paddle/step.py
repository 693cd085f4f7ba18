"""One native Paddle train step (forward, loss, backward, optimizer step, clear_grad), with AMP (O1, or O2 with
master weights) and to_static; in a fleet job the loss layer, optimizer and scaler are fleet's (distributed.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import paddle

from dlbench.backends.base import AllocatorPeak, Trainer
from dlbench.backends.paddle import distributed, evaluate
from dlbench.backends.paddle.data import Batch
from dlbench.backends.paddle.gpu_defaults import GpuPlan
from dlbench.backends.paddle.models import loss_layer
from dlbench.backends.paddle.wide_deep import lazy_adam
from dlbench.cases import Case
from dlbench.numerics import Numerics

# Why a loss-scaled (amp) step waits for the GPU, in Paddle's own code: recorded on every amp point.
AMP_HOST_SYNC = (
    "the loss scaler reads the overflow flag on the host every step (PaddlePaddle's own: "
    "paddle.optimizer.Optimizer._create_optimization_pass tests `if found_inf:` on the GradScaler's "
    "found_inf tensor, and Tensor.__bool__ copies it to the host), so each step waits for the GPU"
)
# --compile: paddle.jit.to_static's default converter (SOT, full_graph=False), Paddle's canonical one.
COMPILED = "paddle.jit.to_static (SOT, full_graph=False: Paddle's default)"


def make_optimizer(
    case: Case, model: paddle.nn.Layer, global_batch: int, multi_precision: bool = False
) -> paddle.optimizer.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (Momentum / Adam / AdamW; lr from Optimizer.lr_for);
    multi_precision keeps fp32 master weights of fp16 parameters (AMP O2)."""
    o = case.optimizer
    params = [p for p in model.parameters() if not p.stop_gradient]
    lr, decay = o.lr_for(global_batch), o.weight_decay or None
    if o.name == "sgd":
        return paddle.optimizer.Momentum(
            learning_rate=lr,
            momentum=o.momentum,
            parameters=params,
            weight_decay=decay,
            multi_precision=multi_precision,
        )
    if o.name == "adamw":  # decoupled weight decay, as torch.optim.AdamW (Adam's would be an L2 term)
        return paddle.optimizer.AdamW(
            learning_rate=lr, parameters=params, weight_decay=o.weight_decay, multi_precision=multi_precision
        )
    return paddle.optimizer.Adam(
        learning_rate=lr,
        parameters=params,
        weight_decay=decay,
        lazy_mode=lazy_adam(model),  # sparse Wide & Deep tables: only touched rows
        multi_precision=multi_precision,
    )


class PaddleTrainer(Trainer):
    """Model, optimizer and input on one device (one rank's, when this process joined a fleet job).

    Numerics (dlbench.numerics): float32, or autocast to float16 (with a GradScaler) or bfloat16 at the plan's
    level: O1, or O2 (parameters cast to the compute dtype by paddle.amp.decorate, fp32 master weights kept by
    the optimizer).
    """

    def __init__(
        self,
        batches: Iterator[Batch],
        case: Case,
        model: paddle.nn.Layer,
        numerics: Numerics,
        on_gpu: bool,
        compile_model: bool,
        global_batch: int,
        plan: GpuPlan | None = None,
    ) -> None:
        super().__init__(batches)
        self.plan = plan or GpuPlan(amp_level="O1" if numerics.autocast else None)
        self.amp_dtype = numerics.compute_dtype if numerics.autocast else None
        optimizer = make_optimizer(case, model, global_batch, multi_precision=self.plan.master_weights)
        if self.amp_dtype is not None and self.plan.amp_level == "O2":
            model, optimizer = paddle.amp.decorate(
                models=model,
                optimizers=optimizer,
                level="O2",
                dtype=self.amp_dtype,
                master_weight=self.plan.master_weights,
            )
        self.case, self.model, self.on_gpu = case, model, on_gpu
        self.optimizer = distributed.distributed_optimizer(optimizer)
        scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**16) if numerics.loss_scaling else None
        self.scaler = distributed.distributed_scaler(scaler) if scaler is not None else None
        forward = loss_layer(case, model)
        forward = paddle.jit.to_static(forward) if compile_model else forward  # SOT: Paddle's default converter
        # In a job, DataParallel around the whole loss layer: it all-reduces the gradients during backward.
        self.forward = distributed.data_parallel(forward)
        self._last: paddle.Tensor | None = None
        self._window: paddle.Tensor | None = None  # the loss summed on the device since the last loss_window
        self._window_steps = 0
        model.train()

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level=self.plan.amp_level or "O1", dtype=self.amp_dtype)

    def train_step(self, batch: Batch) -> None:
        with self._autocast():
            loss = self.forward(*batch.values())
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.clear_grad()
        self._last = loss.detach()
        if self.keep_loss_window:  # only while a convergence curve is read: a device add, no host read
            last = self._last.astype("float32")
            self._window = last if self._window is None else self._window + last
            self._window_steps += 1

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        if self._window is None:
            return self.loss()
        mean = float(self._window.item()) / self._window_steps
        self._window, self._window_steps = None, 0
        return mean

    def sync(self) -> None:
        if self.on_gpu:
            paddle.device.synchronize()
        elif self._last is not None:
            # Eager CPU kernels run in the calling thread; reading the loss also waits for a to_static program.
            self._last.numpy()

    def param_checksum(self) -> float:
        """A float64 sum over the trainable parameters, compared across ranks after the timed steps."""
        return distributed.param_checksum(self.model)

    def save_weights(self, folder: Path) -> None:
        """The whole model's state dict, for the independent evaluation of a --converge point (evaluate.py)."""
        evaluate.save(self.model, folder)

    def agree_steps(self, steps: int) -> int:
        """Rank 0's step count, broadcast to the job's ranks by paddle.distributed; as is on one rank."""
        if paddle.distributed.get_world_size() <= 1:
            return steps
        count = paddle.to_tensor([steps], dtype="int64")
        paddle.distributed.broadcast(count, src=0)
        return int(count.item())

    def loss(self) -> float:
        return float(self._last.astype("float32").item()) if self._last is not None else float("nan")

    def allocator_peak(self) -> AllocatorPeak | None:
        if self.on_gpu:
            return AllocatorPeak(int(paddle.device.cuda.max_memory_allocated()), "paddle_max_allocated")
        return None
