"""Synthetic batches, made once on the device (as tf_cnn_benchmarks does). Never timed. Images are NHWC."""

from __future__ import annotations

import tensorflow as tf

from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, device: str, input_size: int | None = None,
                    seed: int = 0) -> dict[str, tf.Tensor]:
    """One fixed batch for the case on `device` ("/CPU:0", "/GPU:0"); input_size shrinks the image side or
    the sequence length for quick tests."""
    seeds = [tf.constant([seed, i], dtype=tf.int32) for i in range(4)]
    with tf.device(device):
        if isinstance(case.input, ImageInput):
            side = input_size or case.input.size
            images = tf.random.stateless_normal((batch, side, side, case.input.channels), seeds[0])
            labels = tf.random.stateless_uniform((batch,), seeds[1], 0, case.input.classes, dtype=tf.int32)
            return {"images": tf.identity(images), "labels": tf.identity(labels)}
        assert isinstance(case.input, TextInput)
        seq = input_size or case.input.seq_len
        ids = tf.random.stateless_uniform((batch, seq), seeds[0], 0, case.input.vocab, dtype=tf.int32)
        types = tf.cast(tf.range(seq)[None, :] >= seq // 2, tf.int32) * tf.ones((batch, 1), tf.int32)
        masked = tf.random.stateless_uniform((batch, seq), seeds[1]) < case.input.mask_prob
        return {
            "input_ids": ids,
            "token_type_ids": types,
            "attention_mask": tf.ones((batch, seq), tf.int32),
            "mlm_labels": tf.where(masked, ids, tf.fill((batch, seq), -100)),
            "nsp_labels": tf.random.stateless_uniform((batch,), seeds[2], 0, 2, dtype=tf.int32),
        }
