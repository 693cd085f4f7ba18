"""Synthetic batches as numpy arrays, the same for every backend (each moves them to its device once), and the
masked-LM gather that BERT pre-training uses on synthetic and real data alike. Framework-free.

BERT, as Google's and NVIDIA's pre-training feeds it: the masked-LM head predicts only the masked positions,
gathered first: ``mlm_positions`` [B, P], ``mlm_ids`` [B, P] (the original tokens) and ``mlm_weights`` [B, P]
(1 for a real prediction, 0 for padding), with P = max_predictions (20 at sequence 128, scaled with the sequence).
"""

from __future__ import annotations

import numpy as np

from dlbench.cases import CtrInput, ImageInput, LatentInput, TextInput

BERT_KEYS: tuple[str, ...] = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "mlm_positions",
    "mlm_ids",
    "mlm_weights",
    "nsp_labels",
)


def max_predictions(text: TextInput, seq_len: int | None = None) -> int:
    """Masked-LM predictions per sequence: the case's (20 at 128 tokens), scaled with a shorter sequence."""
    seq = seq_len or text.seq_len
    return max(1, round(text.max_predictions * seq / text.seq_len))


def gather_masked(mlm_labels: np.ndarray, predictions: int) -> dict[str, np.ndarray]:
    """From per-token labels ([B, S], -100 where not masked) to the first `predictions` masked positions of
    each row, their labels and weights (rows with fewer are padded with position 0, weight 0)."""
    rows = mlm_labels.shape[0]
    positions = np.zeros((rows, predictions), np.int64)
    ids = np.zeros((rows, predictions), np.int64)
    weights = np.zeros((rows, predictions), np.float32)
    for r in range(rows):
        where = np.flatnonzero(mlm_labels[r] >= 0)[:predictions]
        positions[r, : len(where)] = where
        ids[r, : len(where)] = mlm_labels[r, where]
        weights[r, : len(where)] = 1.0
    return {"mlm_positions": positions, "mlm_ids": ids, "mlm_weights": weights}


def synthetic_bert(text: TextInput, batch: int, seq_len: int | None, seed: int) -> dict[str, np.ndarray]:
    """One BERT pre-training batch: random tokens, two segments, round(15% x S) masked positions per row
    (at most max_predictions, never [CLS] at 0), random next-sentence labels. Integers int64, weights float32."""
    rng = np.random.default_rng(seed)
    seq = seq_len or text.seq_len
    preds = max_predictions(text, seq)
    masked = min(preds, max(1, round(seq * text.mask_prob)), seq - 1)
    ids = rng.integers(0, text.vocab, (batch, seq))
    labels = np.full((batch, seq), -100, np.int64)
    for r in range(batch):
        where = np.sort(rng.choice(np.arange(1, seq), size=masked, replace=False))
        labels[r, where] = ids[r, where]
    types = np.zeros((batch, seq), np.int64)
    types[:, seq // 2 :] = 1
    return {
        "input_ids": ids.astype(np.int64),
        "token_type_ids": types,
        "attention_mask": np.ones((batch, seq), np.int64),
        **gather_masked(labels, preds),
        "nsp_labels": rng.integers(0, 2, batch).astype(np.int64),
    }


def synthetic_gpt(text: TextInput, batch: int, seq_len: int | None, seed: int) -> dict[str, np.ndarray]:
    """One causal-LM batch: S + 1 random tokens per row, split into `input_ids` [B, S] and the next-token `labels`
    [B, S] (labels[:, i] is the token after input_ids[:, i]), int64. Real text for GPT is not read yet."""
    rng = np.random.default_rng(seed)
    seq = seq_len or text.seq_len
    tokens = rng.integers(0, text.vocab, (batch, seq + 1), dtype=np.int64)
    return {"input_ids": np.ascontiguousarray(tokens[:, :-1]), "labels": np.ascontiguousarray(tokens[:, 1:])}


def synthetic_images(
    image: ImageInput, batch: int, side: int | None, seed: int, channels_last: bool = False
) -> dict[str, np.ndarray]:
    """One image batch: standard-normal float32 pixels (NCHW, or NHWC with channels_last) and int64 labels."""
    rng = np.random.default_rng(seed)
    s = side or image.size
    shape = (batch, s, s, image.channels) if channels_last else (batch, image.channels, s, s)
    return {
        "images": rng.standard_normal(shape, dtype=np.float32),
        "labels": rng.integers(0, image.classes, batch).astype(np.int64),
    }


def synthetic_ctr(ctr: CtrInput, batch: int, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """One click-through batch, Criteo-shaped: `dense` [B, 13] float32 in [0, 1), `deep_ids` [B, 26] and
    `wide_ids` [B, 2] int64 drawn uniformly from the vocabulary, `labels` [B, 1] float32 0/1."""
    rng = np.random.default_rng(seed)
    return {
        "dense": rng.random((batch, ctr.dense), dtype=np.float32),
        "deep_ids": rng.integers(0, vocab, (batch, ctr.categorical), dtype=np.int64),
        "wide_ids": rng.integers(0, vocab, (batch, ctr.wide), dtype=np.int64),
        "labels": rng.integers(0, 2, (batch, 1)).astype(np.float32),
    }


def synthetic_latents(latent: LatentInput, batch: int, side: int | None, seed: int) -> dict[str, np.ndarray]:
    """One text-to-image batch as the frozen encoders would hand it to a diffusion transformer, float32 standard
    normal: image `latents` [B, C, side, side] (the VAE's, scaled to unit variance as FLUX's are), T5 `text`
    embeddings [B, T, text_dim] and the CLIP `pooled` embedding [B, pooled_dim]."""
    rng = np.random.default_rng(seed)
    s = side or latent.side
    return {
        "latents": rng.standard_normal((batch, latent.channels, s, s), dtype=np.float32),
        "text": rng.standard_normal((batch, latent.text_tokens, latent.text_dim), dtype=np.float32),
        "pooled": rng.standard_normal((batch, latent.pooled_dim), dtype=np.float32),
    }
