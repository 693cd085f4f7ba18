"""The independent evaluation's side of the TensorFlow backend (#44): the case's Keras model built anew from its
definition (models.build_model, float32), the weights a TfTrainer saved (Keras' own .weights.h5) loaded, batch
normalisation's population statistics recomputed for them (precise_bn.py), then the forward in inference mode on
held-out numpy batches (NCHW images made NHWC here). Nothing here touches the training step (its loss, optimizer,
loss scale or data)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.precise_bn import average_batch_statistics
from dlbench.backends.tf.models import build_model
from dlbench.cases import Case
from dlbench.spec import PointSpec

WEIGHTS = "model.weights.h5"


def save(model: keras.Model, folder: Path) -> None:
    """The model's weights (trainable and batch-norm statistics) as folder/model.weights.h5."""
    model.save_weights(folder / WEIGHTS)


def _images(batch: dict[str, np.ndarray]) -> tf.Tensor:
    return tf.convert_to_tensor(np.ascontiguousarray(batch["images"].transpose(0, 2, 3, 1)))


class Forward:
    """The forward of a fresh Keras model holding the saved weights (images only: the cases TF converges)."""

    def __init__(self, model: keras.Model) -> None:
        self.model = model
        self.norms = [m for m in model._flatten_layers() if isinstance(m, keras.layers.BatchNormalization)]

    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """Each batch norm's averages: the mean of the calibration batches' own statistics."""
        if not self.norms:
            return
        for norm in self.norms:
            norm.momentum = 0.0  # a training-mode call leaves exactly its batch's statistics

        def read() -> list[np.ndarray]:
            return [v.numpy() for n in self.norms for v in (n.moving_mean, n.moving_variance)]

        def write(stats: list[np.ndarray]) -> None:
            for v, s in zip((v for n in self.norms for v in (n.moving_mean, n.moving_variance)), stats, strict=True):
                v.assign(s)

        average_batch_statistics(batches, lambda b: self.model(_images(b), training=True), read, write)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.model(_images(batch), training=False)
        logits = out[0] if isinstance(out, (list, tuple)) else out
        return {"logits": np.asarray(tf.cast(logits, tf.float32).numpy())}


def evaluator(spec: PointSpec, case: Case, weights: Path) -> Forward:
    """A fresh model (float32, on the CPU or the first GPU) holding the saved weights."""
    keras.mixed_precision.set_global_policy("float32")
    model = build_model(case, spec.input_size)
    model.load_weights(weights / WEIGHTS)
    return Forward(model)
