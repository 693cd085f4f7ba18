"""Wide & Deep in Keras: `keras.layers.Embedding` tables (their gradients are tf.IndexedSlices, the rows a batch
touched) and the deep MLP as a functional model, trained with the case's Keras Adam."""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf
from keras import layers, ops

from dlbench.cases import Case
from dlbench.cases.wide_deep import ctr_input, wide_deep_arch

INPUTS: tuple[str, ...] = ("dense", "deep_ids", "wide_ids")
EMBEDDING_PATH = "keras.layers.Embedding (gradients tf.IndexedSlices); keras.optimizers.Adam"


def build_wide_deep(case: Case) -> keras.Model:
    """The wide table (vocab x 1, summed over the wide ids) plus the deep part (vocab x e embeddings of the
    categorical ids with the dense features, through ReLU + dropout layers to one logit)."""
    a, inp = wide_deep_arch(case), ctr_input(case)
    init = keras.initializers.RandomUniform(-0.05, 0.05)  # OneFlow-WDL's table initialiser
    dense = keras.Input((inp.dense,), name="dense_features")
    deep_ids = keras.Input((inp.categorical,), dtype="int32", name="deep_ids")
    wide_ids = keras.Input((inp.wide,), dtype="int32", name="wide_ids")
    wide = ops.sum(layers.Embedding(a.vocab, 1, embeddings_initializer=init, name="wide")(wide_ids), axis=1)
    deep = layers.Flatten()(layers.Embedding(a.vocab, a.embedding, embeddings_initializer=init, name="deep")(deep_ids))
    x = layers.Concatenate()([deep, dense])
    for k, h in enumerate(a.hidden):  # named as torch's nn.Sequential: mlp.0, mlp.3 ... (the same-model check)
        x = layers.Dropout(a.dropout)(layers.Dense(h, activation="relu", name=f"mlp.{3 * k}")(x))
    out = layers.Dense(1, name=f"mlp.{3 * len(a.hidden)}")(x)
    logit = layers.Add(dtype="float32")([ops.cast(wide, "float32"), ops.cast(out, "float32")])
    return keras.Model({"dense": dense, "deep_ids": deep_ids, "wide_ids": wide_ids}, logit, name=case.name)


def bce_loss(model: keras.Model, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """Mean sigmoid binary cross-entropy of the logit against the 0/1 label, in float32."""
    logits = model({k: batch[k] for k in INPUTS}, training=True)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(batch["labels"], tf.float32), logits))


__all__ = ["EMBEDDING_PATH", "bce_loss", "build_wide_deep"]
