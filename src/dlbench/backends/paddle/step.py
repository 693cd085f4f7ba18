"""One native Paddle train step (forward, loss, backward, optimizer step, clear_grad), with AMP and to_static;
in a fleet job the loss layer, optimizer and scaler are fleet's (see distributed.py)."""

from __future__ import annotations

import contextlib

import paddle

from dlbench.backends.base import Trainer
from dlbench.backends.paddle import distributed
from dlbench.backends.paddle.models import loss_layer
from dlbench.cases import Case


def make_optimizer(case: Case, model: paddle.nn.Layer, global_batch: int) -> paddle.optimizer.Optimizer:
    """The case's optimizer with the seeds' hyper-parameters (Momentum / Adam; lr from Optimizer.lr_for)."""
    o = case.optimizer
    params = [p for p in model.parameters() if not p.stop_gradient]
    lr, decay = o.lr_for(global_batch), o.weight_decay or None
    if o.name == "sgd":
        return paddle.optimizer.Momentum(learning_rate=lr, momentum=o.momentum, parameters=params,
                                         weight_decay=decay)
    return paddle.optimizer.Adam(learning_rate=lr, parameters=params, weight_decay=decay)


class PaddleTrainer(Trainer):
    """Model, optimizer and one batch on one device (one rank's, when this process joined a fleet job).

    amp_dtype is None (float32), "float16" (with a GradScaler) or "bfloat16"; autocast is level O1.
    """

    def __init__(self, case: Case, model: paddle.nn.Layer, batch: dict[str, paddle.Tensor], on_gpu: bool,
                 amp_dtype: str | None, compile_model: bool, global_batch: int | None = None) -> None:
        self.case, self.model, self.on_gpu, self.amp_dtype = case, model, on_gpu, amp_dtype
        self.inputs = list(batch.values())
        optimizer = make_optimizer(case, model, global_batch or int(self.inputs[0].shape[0]))
        self.optimizer = distributed.distributed_optimizer(optimizer)
        scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**16) if amp_dtype == "float16" else None
        self.scaler = distributed.distributed_scaler(scaler) if scaler is not None else None
        forward = loss_layer(case.name, model)
        # full_graph=True: the AST translator, which fails loudly rather than falling back to eager pieces.
        forward = paddle.jit.to_static(forward, full_graph=True) if compile_model else forward
        # In a job, DataParallel around the whole loss layer: it all-reduces the gradients during backward.
        self.forward = distributed.data_parallel(forward)
        self._last: paddle.Tensor | None = None
        model.train()

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level="O1", dtype=self.amp_dtype)

    def step(self) -> None:
        with self._autocast():
            loss = self.forward(*self.inputs)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.clear_grad()
        self._last = loss.detach()

    def sync(self) -> None:
        if self.on_gpu:
            paddle.device.synchronize()
        elif self._last is not None:
            # Eager CPU kernels run in the calling thread; reading the loss also waits for a to_static program.
            self._last.numpy()

    def param_checksum(self) -> float:
        """A float64 sum over the trainable parameters, compared across ranks after the timed steps."""
        return distributed.param_checksum(self.model)

    def loss(self) -> float:
        return float(self._last.astype("float32").item()) if self._last is not None else float("nan")

    def peak_memory_bytes(self) -> int | None:
        if self.on_gpu:
            return int(paddle.device.cuda.max_memory_allocated())
        return None
