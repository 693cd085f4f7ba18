"""What every real-data pipeline shares, framework-free (numpy and Pillow): the random-resized-crop box,
PIL decoding with crop, resize and flip, and the BERT sample arrays. Backends call these from their own
framework's loader (DataLoader workers, paddle.io, gluon, jittor.dataset ...), which supplies the RNG.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from dlbench.data.layout import (
    CROP_RATIO,
    CROP_SCALE,
    FLIP_PROB,
    SAMPLE_ARRAYS,
    SAMPLES,
    DataLayoutError,
    TrainItem,
    text_root,
)

Uniform = Callable[[float, float], float]  # a draw in [lo, hi)
RandInt = Callable[[int, int], int]  # a draw in [lo, hi)


def crop_box(width: int, height: int, uniform: Uniform, randint: RandInt) -> tuple[int, int, int, int]:
    """Random-resized-crop box (left, top, right, bottom): torchvision's algorithm, drawn with the given RNG.

    Ten tries at an area in CROP_SCALE and an aspect in CROP_RATIO (log-uniform); when all fail, the
    ratio-clamped centre crop.
    """
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * uniform(*CROP_SCALE)
        aspect = math.exp(uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = randint(0, height - h + 1)
            left = randint(0, width - w + 1)
            return left, top, left + w, top + h
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif ratio > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def numpy_rng(rng: np.random.Generator | None = None) -> tuple[Uniform, RandInt]:
    """(uniform, randint) drawing from a numpy Generator, or from numpy's global RNG when None."""
    if rng is None:
        return (lambda lo, hi: float(np.random.uniform(lo, hi)), lambda lo, hi: int(np.random.randint(lo, hi)))
    return (lambda lo, hi: float(rng.uniform(lo, hi)), lambda lo, hi: int(rng.integers(lo, hi)))


def decode_crop_flip(path: str | Path, side: int, uniform: Uniform, randint: RandInt, flip_prob: float) -> np.ndarray:
    """A JPEG decoded with Pillow, random-resized-cropped to side x side (bilinear), flipped with
    probability flip_prob: an HWC uint8 array."""
    with Image.open(path) as src:
        img = src.convert("RGB")
    img = img.resize((side, side), Image.Resampling.BILINEAR, box=crop_box(*img.size, uniform, randint))
    if uniform(0.0, 1.0) < flip_prob:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(img, dtype=np.uint8)


def enough_samples(n: int, batch_size: int, data_dir: str | None) -> None:
    """DataLayoutError when a data folder holds fewer samples than one batch."""
    if n < batch_size:
        raise DataLayoutError(
            f"{data_dir} holds {n} samples, fewer than the batch size {batch_size}: make more with `dlbench data`"
        )


def bert_arrays(
    data_dir: str | Path, input_size: int | None, predictions: int, dtype: str = "int64"
) -> dict[str, np.ndarray]:
    """The samples of bert_samples.npz as a BERT batch's arrays (dlbench.data.synthetic.BERT_KEYS): 2-D ones cut to
    the first input_size columns, the masked-LM labels gathered into `predictions` positions per row; integers
    as dtype, weights float32."""
    from dlbench.data.synthetic import gather_masked

    root = text_root(data_dir)
    with np.load(root / SAMPLES) as npz:
        missing = set(SAMPLE_ARRAYS) - set(npz.files)
        if missing:
            raise DataLayoutError(f"{root / SAMPLES} lacks {', '.join(sorted(missing))}")
        arrays = {k: npz[k] for k in SAMPLE_ARRAYS}
    full = arrays["input_ids"].shape[1]
    seq = min(input_size or full, full)
    cut = {k: np.ascontiguousarray(v[:, :seq] if v.ndim == 2 else v) for k, v in arrays.items()}
    gathered = gather_masked(cut.pop("mlm_labels"), predictions)
    out = {k: v.astype(dtype) for k, v in cut.items()}
    out.update(
        mlm_positions=gathered["mlm_positions"].astype(dtype),
        mlm_ids=gathered["mlm_ids"].astype(dtype),
        mlm_weights=gathered["mlm_weights"],
    )
    return out


class AugmentedImages:
    """train_list.txt items, decoded and augmented, for a framework's map-style dataset (subclass it together with
    the framework's ``Dataset``): item ``(index, draw)`` -> (side x side uint8 CHW array, label as `label_type`).
    Each draw of a sample has its own RNG, seeded by (seed, draw), so every worker and epoch reproduces it."""

    label_type: type[np.generic] = np.int64

    def __init__(self, items: list[TrainItem], side: int, seed: int) -> None:
        self.items, self.side, self.seed = items, side, seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, draw: tuple[int, int]) -> tuple[np.ndarray, np.generic]:
        index, k = draw
        item = self.items[index]
        rng = numpy_rng(np.random.default_rng((self.seed, k)))
        pixels = decode_crop_flip(item.path, self.side, *rng, FLIP_PROB)
        return np.ascontiguousarray(pixels.transpose(2, 0, 1)), self.label_type(item.label)
