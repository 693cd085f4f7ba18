"""The keras framework's train step (#46): the case's model wrapped with the case's loss in keras.ops, trained by
Keras' own ``Model.train_on_batch`` under ``compile(jit_compile=...)``, so that the same step runs on the JAX,
TensorFlow and PyTorch backends of Keras 3 as a Keras user runs it (each backend's own trainer: jax.jit, tf.function
with XLA, torch.compile where jit_compile is on). ``train_on_batch`` hands the loss to the host every step, as
``fit`` does at one step per execution: every point says so (STEP)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from dlbench.backends.base import Trainer
from dlbench.cases import Case

STEP = "keras Model.train_on_batch: the backend's own train step; the loss comes to the host every step"


def _xent(labels: Any, logits: Any) -> Any:
    """Per-example softmax cross-entropy, in float32."""
    return ops.sparse_categorical_crossentropy(labels, ops.cast(logits, "float32"), from_logits=True)


def case_loss(case: Case, batch: Mapping[str, Any], out: Any) -> Any:
    """The case's training loss (a float32 scalar), as the tf backend's: a decoder's mean next-token cross-entropy
    (+ a MoE's weighted balancing loss), BERT's weighted masked-LM + NSP, an image model's cross-entropy."""
    if case.loss.kind == "causal_lm":
        logits, aux = out if isinstance(out, tuple) else (out, None)
        loss = ops.mean(_xent(batch["labels"], logits))
        return loss if aux is None else loss + case.loss.aux_weight * ops.cast(aux, "float32")
    if case.loss.kind == "mlm_nsp":
        mlm_logits, nsp_logits = out
        weights = ops.cast(batch["mlm_weights"], "float32")
        mlm = ops.sum(_xent(batch["mlm_ids"], mlm_logits) * weights) / (ops.sum(weights) + 1e-5)
        return mlm + ops.mean(_xent(batch["nsp_labels"], nsp_logits))
    return ops.mean(_xent(batch["labels"], out))


class CaseModel(keras.Model):
    """The case's model taking the whole batch (a dict of arrays) and computing the case's loss itself
    (``compute_loss``), so that ``train_on_batch(batch)`` needs no targets."""

    def __init__(self, case: Case, inner: keras.Model, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case, self.inner = case, inner

    def call(self, batch: Mapping[str, Any], training: bool = False) -> Any:
        """The inner model's outputs for the batch."""
        if "images" in batch:
            return self.inner(batch["images"], training=training)
        if self.case.loss.kind == "causal_lm":
            return self.inner(batch["input_ids"], training=training)
        return self.inner(batch, training=training)

    def compute_loss(
        self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None, training: bool = True
    ) -> Any:
        """The case's loss of the batch `x` (Keras' hook, called inside each backend's train step)."""
        return case_loss(self.case, x, y_pred)


def optimizer(case: Case, global_batch: int) -> keras.optimizers.Optimizer:
    """The case's optimizer at its learning rate for this batch: SGD with momentum, Adam, or AdamW with torch's
    decoupled weight decay; torch's epsilon."""
    o, lr = case.optimizer, case.optimizer.lr_for(global_batch)
    if o.name == "sgd":
        return keras.optimizers.SGD(learning_rate=lr, momentum=o.momentum)
    if o.name == "adamw":
        return keras.optimizers.AdamW(learning_rate=lr, weight_decay=o.weight_decay, epsilon=1e-8)
    return keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)


class KerasTrainer(Trainer):
    """A compiled CaseModel stepping on numpy batches through ``train_on_batch``."""

    def __init__(self, model: CaseModel, batches: Iterator[dict[str, np.ndarray]]) -> None:
        super().__init__(batches)
        self.model = model
        self._loss = float("nan")

    def train_step(self, batch: dict[str, np.ndarray]) -> None:
        self._loss = float(self.model.train_on_batch(batch, return_dict=True)["loss"])

    def sync(self) -> None:
        """Nothing to wait for: train_on_batch returned the step's loss on the host."""

    def loss(self) -> float:
        return self._loss


__all__ = ["STEP", "CaseModel", "KerasTrainer", "case_loss", "optimizer"]
