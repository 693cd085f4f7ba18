"""Paddle real-data input (docs/data-layout.md): a paddle.io.DataLoader with worker processes and prefetch.

Images: PIL decode, random-resized-crop and flip in the loader workers (numpy's global RNG, which paddle
reseeds per worker from the main process's), uint8 batches normalised on the device. BERT: the rows of
bert_samples.npz as int64. The trainer takes a batch from the iterator at each step and counts the time
spent waiting in next() during timed steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import paddle
from PIL import Image

from dlbench.backends.paddle.step import PaddleTrainer
from dlbench.cases import Case, ImageInput
from dlbench.data.layout import (
    CROP_RATIO,
    CROP_SCALE,
    FLIP_PROB,
    MEAN,
    SAMPLE_ARRAYS,
    SAMPLES,
    STD,
    DataLayoutError,
    TrainItem,
    image_root,
    read_train_list,
    text_root,
)
from dlbench.spec import PointSpec

PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead
Batch = list[paddle.Tensor]


def crop_box(width: int, height: int) -> tuple[int, int, int, int]:
    """Random-resized-crop box (left, top, right, bottom): torchvision's algorithm, drawn with numpy's RNG."""
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * np.random.uniform(*CROP_SCALE)
        aspect = math.exp(np.random.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(np.random.randint(0, height - h + 1))
            left = int(np.random.randint(0, width - w + 1))
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


class ImageList(paddle.io.Dataset):  # type: ignore[misc]
    """train_list.txt items, decoded and augmented to (side x side uint8 CHW array, int64 label)."""

    def __init__(self, items: list[TrainItem], side: int) -> None:
        super().__init__()
        self.items, self.side = items, side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int64]:
        item = self.items[index]
        with Image.open(item.path) as src:
            img = src.convert("RGB")
        img = img.resize((self.side, self.side), Image.Resampling.BILINEAR, box=crop_box(*img.size))
        if np.random.random() < FLIP_PROB:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(img, dtype=np.uint8).transpose(2, 0, 1).copy(), np.int64(item.label)


class BertSamples(paddle.io.Dataset):  # type: ignore[misc]
    """Rows of bert_samples.npz as int64 arrays, cut to the first seq_len columns, in SAMPLE_ARRAYS order."""

    def __init__(self, arrays: dict[str, np.ndarray], seq_len: int) -> None:
        super().__init__()
        self.arrays = [(arrays[k][:, :seq_len] if arrays[k].ndim == 2 else arrays[k]).astype(np.int64)
                       for k in SAMPLE_ARRAYS]

    def __len__(self) -> int:
        return len(self.arrays[-1])

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.arrays)


def _loader(dataset: paddle.io.Dataset, spec: PointSpec) -> paddle.io.DataLoader:
    n = len(dataset)
    if n < spec.batch_size:
        raise DataLayoutError(f"{spec.data_dir} holds {n} samples, fewer than the batch size {spec.batch_size}: "
                              "make more with `dlbench data`")
    workers = spec.loader_workers
    return paddle.io.DataLoader(dataset, batch_size=spec.batch_size, shuffle=True, drop_last=True,
                                num_workers=workers, prefetch_factor=PREFETCH_FACTOR,
                                persistent_workers=workers > 0, return_list=True)


def _to_device(t: paddle.Tensor, on_gpu: bool) -> paddle.Tensor:
    return t.cuda() if on_gpu else t


def image_batches(spec: PointSpec, case: Case, on_gpu: bool) -> Iterator[Batch]:
    """Endless normalised image batches [images, labels] on the device, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    loader = _loader(ImageList(read_train_list(image_root(spec.data_dir or "")), side), spec)
    mean = _to_device(paddle.to_tensor(MEAN, dtype="float32").reshape([1, 3, 1, 1]) * 255, on_gpu)
    std = _to_device(paddle.to_tensor(STD, dtype="float32").reshape([1, 3, 1, 1]) * 255, on_gpu)
    while True:
        for images, labels in loader:
            x = (_to_device(images, on_gpu).astype("float32") - mean) / std
            yield [x, _to_device(labels, on_gpu).reshape([-1])]


def text_batches(spec: PointSpec, on_gpu: bool) -> Iterator[Batch]:
    """Endless BERT batches (the loss layer's five inputs) on the device, epoch after epoch."""
    root = text_root(spec.data_dir or "")
    with np.load(root / SAMPLES) as npz:
        missing = set(SAMPLE_ARRAYS) - set(npz.files)
        if missing:
            raise DataLayoutError(f"{root / SAMPLES} lacks {', '.join(sorted(missing))}")
        arrays = {k: npz[k] for k in SAMPLE_ARRAYS}
    seq = min(spec.input_size or arrays["input_ids"].shape[1], arrays["input_ids"].shape[1])
    loader = _loader(BertSamples(arrays, seq), spec)
    while True:
        for batch in loader:
            *inputs, nsp = [_to_device(t, on_gpu) for t in batch]
            yield [*inputs, nsp.reshape([-1])]


class LoaderTrainer(PaddleTrainer):
    """A PaddleTrainer whose batch comes from an iterator at every step.

    It counts the time spent waiting in next() during measured steps only: the protocol runs, per repeat,
    `warmup` untimed steps then `steps` timed ones, so step k after reset_input_wait() is timed when
    k mod (warmup + steps) >= warmup. The first batch is taken at build time, never timed.
    """

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, case: Case, model: paddle.nn.Layer,
                 on_gpu: bool, amp_dtype: str | None, compile_model: bool, global_batch: int) -> None:
        self.source = source
        self.cycle, self.warmup = warmup + steps, warmup
        self.waited, self.taken = 0.0, 0
        first = next(source)
        super().__init__(case, model, {str(i): t for i, t in enumerate(first)}, on_gpu, amp_dtype, compile_model,
                         global_batch=global_batch)

    def step(self) -> None:
        start = time.perf_counter()
        self.inputs = next(self.source)
        if self.taken % self.cycle >= self.warmup:
            self.waited += time.perf_counter() - start
        self.taken += 1
        super().step()

    def input_wait_s(self) -> float:
        return self.waited

    def reset_input_wait(self) -> None:
        self.waited, self.taken = 0.0, 0

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


def build_trainer(spec: PointSpec, case: Case, model: paddle.nn.Layer, on_gpu: bool, amp_dtype: str | None,
                  seed: int) -> LoaderTrainer:
    """A trainer fed by the case's real-data loader; seed fixes the shuffling and the augmentation."""
    np.random.seed(seed)  # paddle's sampler shuffles, and seeds each worker, from numpy's global RNG
    source = image_batches(spec, case, on_gpu) if isinstance(case.input, ImageInput) else text_batches(spec, on_gpu)
    p = spec.protocol
    return LoaderTrainer(source, p.warmup, p.steps, case, model, on_gpu, amp_dtype, spec.compile,
                         global_batch=spec.global_batch)


__all__ = ["LoaderTrainer", "build_trainer", "crop_box"]
