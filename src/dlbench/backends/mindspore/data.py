"""MindSpore real-data input (docs/data-layout.md): a ``mindspore.dataset`` pipeline with parallel workers.

Images: the train_list.txt items (their labels, not ImageFolderDataset's folder order) as JPEG bytes from a
GeneratorDataset, then MindSpore's native C++ vision ops in ``num_parallel_workers`` threads: Decode,
RandomResizedCrop (the layout's scale and ratio, 10 tries, then a centre crop), RandomHorizontalFlip,
Normalize and HWC2CHW. BERT: the rows of bert_samples.npz through NumpySlicesDataset, as int32 (what the
synthetic batch holds). Each epoch is reshuffled (seed ``ds.config.set_seed``) and drops its last partial
batch; the trainer takes the next batch at each step and counts the wait for it in measured steps.
"""

from __future__ import annotations

from collections.abc import Iterator

import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor, nn
from mindspore.dataset import vision

from dlbench.backends.base import InputFed
from dlbench.backends.mindspore.step import MindsporeTrainer
from dlbench.cases import Case, ImageInput
from dlbench.data.augment import bert_arrays, enough_samples
from dlbench.data.layout import (
    CROP_RATIO,
    CROP_SCALE,
    FLIP_PROB,
    MEAN,
    SAMPLE_ARRAYS,
    STD,
    TrainItem,
    image_root,
    read_train_list,
)
from dlbench.spec import PointSpec

Batch = list[Tensor]


class JpegBytes:
    """train_list.txt items as (encoded JPEG bytes, int32 label): a random-access GeneratorDataset source."""

    def __init__(self, items: list[TrainItem]) -> None:
        self.paths = [str(i.path) for i in items]
        self.labels = np.array([i.label for i in items], np.int32)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return np.fromfile(self.paths[index], np.uint8), self.labels[index]


def _iterate(dataset: ds.Dataset, spec: PointSpec) -> Iterator[Batch]:
    """Batch (dropping each epoch's partial batch), repeat endlessly, and yield Tensors; closing stops it."""
    dataset = dataset.batch(spec.batch_size, drop_remainder=True).repeat()
    it = dataset.create_tuple_iterator(num_epochs=1)
    try:
        yield from it
    finally:
        it.stop()


def image_batches(spec: PointSpec, case: Case) -> Iterator[Batch]:
    """Endless [images NCHW float32, labels int32] batches, normalised, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    items = read_train_list(image_root(spec.data_dir or ""))
    enough_samples(len(items), spec.batch_size, spec.data_dir)
    workers = spec.loader_workers or 1
    source = ds.GeneratorDataset(JpegBytes(items), ["image", "label"], shuffle=True, num_parallel_workers=workers,
                                 python_multiprocessing=False)  # reading bytes: threads suffice
    ops = [vision.Decode(), vision.RandomResizedCrop(side, scale=CROP_SCALE, ratio=CROP_RATIO,
                                                     interpolation=vision.Inter.BILINEAR, max_attempts=10),
           vision.RandomHorizontalFlip(FLIP_PROB),
           vision.Normalize([m * 255 for m in MEAN], [s * 255 for s in STD]), vision.HWC2CHW()]
    return _iterate(source.map(ops, input_columns="image", num_parallel_workers=workers), spec)


def text_batches(spec: PointSpec) -> Iterator[Batch]:
    """Endless BERT batches (the loss Cell's five int32 inputs), cut to input_size columns, epoch after epoch."""
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, "int32")
    enough_samples(len(arrays["nsp_labels"]), spec.batch_size, spec.data_dir)
    source = ds.NumpySlicesDataset(tuple(arrays[k] for k in SAMPLE_ARRAYS), list(SAMPLE_ARRAYS), shuffle=True,
                                   num_parallel_workers=spec.loader_workers or 1)
    return _iterate(source, spec)


class LoaderTrainer(InputFed, MindsporeTrainer):
    """A MindsporeTrainer whose batch comes from a dataset iterator at every step (wait counted by InputFed).

    The batches keep one shape and dtype (drop_remainder), so the ms.jit step compiles once.
    """

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, case: Case, net: nn.Cell,
                 global_batch: int, compiled: bool) -> None:
        first = self.feed(source, warmup, steps)
        super().__init__(case, net, list(first), global_batch, compiled)

    def step(self) -> None:
        self.batch = list(self.next_input())
        super().step()


def build_trainer(spec: PointSpec, case: Case, net: nn.Cell) -> LoaderTrainer:
    """A trainer fed by the case's real-data pipeline; spec.seed fixes the shuffling and the augmentation."""
    ds.config.set_seed(spec.seed)
    source = image_batches(spec, case) if isinstance(case.input, ImageInput) else text_batches(spec)
    p = spec.protocol
    return LoaderTrainer(source, p.warmup, p.steps, case, net, spec.global_batch, spec.compile)


__all__ = ["LoaderTrainer", "build_trainer"]
