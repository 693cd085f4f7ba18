"""One native TF train step: a ``tf.function`` (XLA ``jit_compile`` with --compile) doing the forward pass
under a GradientTape, the loss, the gradients and the optimizer update; plus the case's optimizer and loss."""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf

from dlbench.backends.base import Trainer
from dlbench.cases import Case


def make_optimizer(case: Case, global_batch: int, loss_scale: bool) -> keras.optimizers.Optimizer:
    """The case's optimizer (lr from ``Optimizer.lr_for``), wrapped for dynamic loss scaling when asked."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    opt: keras.optimizers.Optimizer
    if o.name == "sgd":  # Keras' momentum form equals torch's for a constant learning rate
        opt = keras.optimizers.SGD(learning_rate=lr, momentum=o.momentum)
    else:
        opt = keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)  # torch's epsilon
    return keras.optimizers.LossScaleOptimizer(opt) if loss_scale else opt


def _xent(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-example softmax cross-entropy, computed in float32."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))


def train_loss(case: Case, model: keras.Model, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """The training loss (cross-entropy; + 0.4 aux for Inception v3; MLM + NSP for BERT), float32 scalar."""
    if case.task == "bert_pretraining":
        mlm_logits, nsp_logits = model(batch, training=True)
        labels = batch["mlm_labels"]
        valid = tf.cast(labels >= 0, tf.float32)
        mlm = _xent(tf.maximum(labels, 0), mlm_logits) * valid
        mlm = tf.reduce_sum(mlm) / tf.maximum(tf.reduce_sum(valid), 1.0)
        return mlm + tf.reduce_mean(_xent(batch["nsp_labels"], nsp_logits))
    out = model(batch["images"], training=True)
    labels = batch["labels"]
    if isinstance(out, (list, tuple)):  # Inception v3: [logits, aux_logits]
        return tf.reduce_mean(_xent(labels, out[0])) + 0.4 * tf.reduce_mean(_xent(labels, out[1]))
    return tf.reduce_mean(_xent(labels, out))


class TfTrainer(Trainer):
    """Model, optimizer and one batch on one device; ``step`` runs one traced (optionally XLA) train step."""

    def __init__(self, case: Case, model: keras.Model, batch: dict[str, tf.Tensor], device: str,
                 jit_compile: bool, loss_scale: bool, global_batch: int) -> None:
        self.case, self.model, self.batch, self.device = case, model, batch, device
        self.optimizer = make_optimizer(case, global_batch, loss_scale)
        with tf.device(device):
            self.optimizer.build(model.trainable_variables)  # slots exist before tracing
        self._step = tf.function(self._train_step, jit_compile=jit_compile, autograph=False)  # no Python branches
        self._last: tf.Tensor | None = None
        self._host: float | None = None

    def _train_step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = train_loss(self.case, self.model, batch)
            scaled = self.optimizer.scale_loss(loss)  # identity unless loss-scaled
        grads = tape.gradient(scaled, variables)
        self.optimizer.apply(grads, variables)  # a LossScaleOptimizer unscales and skips non-finite steps
        return loss

    def step(self) -> None:
        with tf.device(self.device):
            self._last = self._step(self.batch)
        self._host = None

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

    def peak_memory_bytes(self) -> int | None:
        if self.device.startswith("/GPU"):
            return int(tf.config.experimental.get_memory_info(self.device.strip("/"))["peak"])
        return None
