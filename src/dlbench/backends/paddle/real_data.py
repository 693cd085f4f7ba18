"""Paddle real-data input (docs/data-layout.md): a paddle.io.DataLoader with worker processes and prefetch.

Images: PIL decode, random-resized-crop and flip in the loader workers (numpy's global RNG, which paddle
reseeds per worker from the main process's), uint8 batches normalised on the device. BERT: the rows of
bert_samples.npz as int64. The trainer takes a batch from the iterator at each step and counts the time
spent waiting in next() during timed steps.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import paddle

from dlbench.backends.base import InputFed
from dlbench.backends.paddle.step import PaddleTrainer
from dlbench.cases import Case, ImageInput
from dlbench.data.augment import (
    bert_arrays,
    decode_crop_flip,
    enough_samples,
    numpy_rng,
)
from dlbench.data.layout import (
    FLIP_PROB,
    MEAN,
    SAMPLE_ARRAYS,
    STD,
    TrainItem,
    image_root,
    read_train_list,
)
from dlbench.spec import PointSpec

PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead
Batch = list[paddle.Tensor]


class ImageList(paddle.io.Dataset):  # type: ignore[misc]
    """train_list.txt items, decoded and augmented to (side x side uint8 CHW array, int64 label)."""

    def __init__(self, items: list[TrainItem], side: int) -> None:
        super().__init__()
        self.items, self.side = items, side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int64]:
        item = self.items[index]
        pixels = decode_crop_flip(item.path, self.side, *numpy_rng(), FLIP_PROB)  # numpy's global RNG
        return pixels.transpose(2, 0, 1).copy(), np.int64(item.label)


class BertSamples(paddle.io.Dataset):  # type: ignore[misc]
    """Rows of bert_samples.npz as int64 arrays, in SAMPLE_ARRAYS order."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.arrays = [arrays[k] for k in SAMPLE_ARRAYS]

    def __len__(self) -> int:
        return len(self.arrays[-1])

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.arrays)


def _loader(dataset: paddle.io.Dataset, spec: PointSpec) -> paddle.io.DataLoader:
    enough_samples(len(dataset), spec.batch_size, spec.data_dir)
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
    loader = _loader(BertSamples(bert_arrays(spec.data_dir or "", spec.input_size)), spec)
    while True:
        for batch in loader:
            *inputs, nsp = [_to_device(t, on_gpu) for t in batch]
            yield [*inputs, nsp.reshape([-1])]


class LoaderTrainer(InputFed, PaddleTrainer):
    """A PaddleTrainer whose batch comes from an iterator at every step (wait counted by InputFed)."""

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, case: Case, model: paddle.nn.Layer,
                 on_gpu: bool, amp_dtype: str | None, compile_model: bool, global_batch: int) -> None:
        first = self.feed(source, warmup, steps)
        super().__init__(case, model, {str(i): t for i, t in enumerate(first)}, on_gpu, amp_dtype, compile_model,
                         global_batch=global_batch)

    def step(self) -> None:
        self.inputs = self.next_input()
        super().step()


def build_trainer(spec: PointSpec, case: Case, model: paddle.nn.Layer, on_gpu: bool, amp_dtype: str | None,
                  seed: int) -> LoaderTrainer:
    """A trainer fed by the case's real-data loader; seed fixes the shuffling and the augmentation."""
    np.random.seed(seed)  # paddle's sampler shuffles, and seeds each worker, from numpy's global RNG
    source = image_batches(spec, case, on_gpu) if isinstance(case.input, ImageInput) else text_batches(spec, on_gpu)
    p = spec.protocol
    return LoaderTrainer(source, p.warmup, p.steps, case, model, on_gpu, amp_dtype, spec.compile,
                         global_batch=spec.global_batch)


__all__ = ["LoaderTrainer", "build_trainer"]
