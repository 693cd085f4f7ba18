"""Synthetic batches, made once on the device (as tf_cnn_benchmarks does). Never timed."""

from __future__ import annotations

import numpy as np
import paddle

from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, input_size: int | None = None, seed: int = 0) -> dict[str, paddle.Tensor]:
    """One fixed batch on paddle's current device, keys in the order ``models.loss_layer`` takes them.

    input_size shrinks the image side or the sequence length for quick tests.
    """
    rng = np.random.default_rng(seed)
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        images = rng.standard_normal((batch, case.input.channels, side, side), dtype=np.float32)
        labels = rng.integers(0, case.input.classes, (batch,), dtype=np.int64)
        return {"images": paddle.to_tensor(images), "labels": paddle.to_tensor(labels)}
    assert isinstance(case.input, TextInput)
    seq = input_size or case.input.seq_len
    ids = rng.integers(0, case.input.vocab, (batch, seq), dtype=np.int64)
    types = np.zeros((batch, seq), dtype=np.int64)
    types[:, seq // 2:] = 1
    mask = np.ones((batch, seq), dtype=np.int64)
    masked = rng.random((batch, seq)) < case.input.mask_prob
    masked[0, -1] = True  # at least one masked token, so the MLM loss is defined even for tiny batches
    mlm = np.where(masked, ids, -100).astype(np.int64)
    nsp = rng.integers(0, 2, (batch,), dtype=np.int64)
    arrays = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "mlm_labels": mlm,
              "nsp_labels": nsp}
    return {k: paddle.to_tensor(v) for k, v in arrays.items()}
