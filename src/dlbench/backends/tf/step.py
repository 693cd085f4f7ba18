"""One native TF train step: a ``tf.function`` (XLA ``jit_compile`` with --compile) doing the forward pass
under a GradientTape, the loss, the gradients and the optimizer update; plus the case's optimizer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import keras
import tensorflow as tf

from dlbench.backends.base import AllocatorPeak, Trainer
from dlbench.backends.tf import evaluate
from dlbench.backends.tf.models import train_loss
from dlbench.cases import Case

Batch = dict[str, tf.Tensor]
# Why a loss-scaled (amp) step waits for the GPU, in TensorFlow's own code: recorded on every amp point.
AMP_HOST_SYNC = (
    "the loss scaler reads the overflow flag on the host every step (TensorFlow's own: "
    "keras LossScaleOptimizer._common_apply branches with ops.cond(finite, ...), a tf.cond whose "
    "Switch/If kernel takes its predicate in host memory on a GPU; under XLA, the GPU "
    "ConditionalThunk copies it to the host and waits), so each step waits for the GPU"
)


def make_optimizer(case: Case, global_batch: int, loss_scale: bool) -> keras.optimizers.Optimizer:
    """The case's optimizer (lr from ``Optimizer.lr_for``), wrapped for dynamic loss scaling when asked."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    opt: keras.optimizers.Optimizer
    if o.name == "sgd":  # Keras' momentum form equals torch's for a constant learning rate
        opt = keras.optimizers.SGD(learning_rate=lr, momentum=o.momentum)
    elif o.name == "adamw":  # decoupled weight decay on every weight, as torch.optim.AdamW
        opt = keras.optimizers.AdamW(learning_rate=lr, weight_decay=o.weight_decay, epsilon=1e-8)
    else:
        opt = keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)  # torch's epsilon
    return keras.optimizers.LossScaleOptimizer(opt) if loss_scale else opt


def gpu_peak(device: str) -> AllocatorPeak | None:
    """TF's BFC allocator peak on a GPU device ("/GPU:0"), None on the CPU."""
    if "GPU" not in device.upper():
        return None
    name = "GPU:" + device.upper().rsplit("GPU:", 1)[1]
    return AllocatorPeak(int(tf.config.experimental.get_memory_info(name)["peak"]), "tf_peak")


class LossOnHost(Trainer):
    """A TF trainer whose steps leave their loss tensor in ``_last``: synchronised by fetching it."""

    _last: tf.Tensor | None = None
    _host: float | None = None

    def sync(self) -> None:
        """Fetch the loss to the host, then wait for every queued op on every device: the variable updates are
        queued after the loss, so the loss alone does not prove the step finished on an asynchronous GPU."""
        if self._last is not None:
            self._host = float(self._last.numpy())
        tf.test.experimental.sync_devices()

    def loss(self) -> float:
        if self._host is None:
            self.sync()
        return self._host if self._host is not None else float("nan")


class TfTrainer(LossOnHost):
    """Model, optimizer and input on one device; ``train_step`` runs one traced (optionally XLA) train step."""

    def __init__(
        self,
        case: Case,
        model: keras.Model,
        batches: Iterator[Batch],
        device: str,
        jit_compile: bool,
        loss_scale: bool,
        global_batch: int,
    ) -> None:
        super().__init__(batches)
        self.case, self.model, self.device = case, model, device
        self.optimizer = make_optimizer(case, global_batch, loss_scale)
        with tf.device(device):
            self.optimizer.build(model.trainable_variables)  # slots exist before tracing
        self._step = tf.function(self._train_step, jit_compile=jit_compile, autograph=False)  # no Python branches
        self._window: tf.Tensor | None = None  # the loss summed on the device since the last loss_window
        self._window_steps = 0

    def _train_step(self, batch: Batch) -> tf.Tensor:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = train_loss(self.case, self.model, batch)
            scaled = self.optimizer.scale_loss(loss)  # identity unless loss-scaled
        grads = tape.gradient(scaled, variables)
        self.optimizer.apply(grads, variables)  # a LossScaleOptimizer unscales and skips non-finite steps
        return loss

    def train_step(self, batch: Batch) -> None:
        with tf.device(self.device):
            self._last = self._step(batch)
            if self.keep_loss_window:  # only while a convergence curve is read: a device add, no host read
                self._window = self._last if self._window is None else self._window + self._last
                self._window_steps += 1
        self._host = None

    def loss_window(self) -> float:
        """The mean loss since the last call: one host read of a sum kept on the device."""
        if self._window is None:
            return self.loss()
        mean = float(self._window.numpy()) / self._window_steps
        self._window, self._window_steps = None, 0
        return mean

    def save_weights(self, folder: Path) -> None:
        """The model's weights in Keras' own format, for the independent evaluation (evaluate.py: image classifiers)."""
        if self.case.task != "image_classification":
            raise NotImplementedError(f"TensorFlow's evaluator reads image classifiers only yet, not {self.case.task}")
        evaluate.save(self.model, folder)

    def allocator_peak(self) -> AllocatorPeak | None:
        return gpu_peak(self.device)
