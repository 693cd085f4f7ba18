"""MindSpore input: a synthetic batch made once (dlbench.data.synthetic's arrays), or real data
(docs/data-layout.md) through a ``mindspore.dataset`` pipeline with parallel workers.

A batch is a list of Tensors, the loss Cell's positional inputs: [images, labels], BERT's arrays in ``BERT_KEYS``
order (integers int32, the masked-LM weights float32), or a decoder's [input_ids, labels] (int32). --converge
feeds the learnable stream (data/learnable.py), a new batch drawn on the host each step.

Images: the train_list.txt items (their labels, not ImageFolderDataset's folder order) as JPEG bytes from a
GeneratorDataset, then MindSpore's native C++ vision ops in ``num_parallel_workers`` threads: Decode,
RandomResizedCrop (the layout's scale and ratio, 10 tries, then a centre crop), RandomHorizontalFlip,
Normalize and HWC2CHW. BERT: the rows of bert_samples.npz, masked positions gathered (``bert_arrays``), through
NumpySlicesDataset as int32. Each epoch is reshuffled (seed ``ds.config.set_seed``) and drops its last partial
batch, so every batch has one shape and the ms.jit step compiles once.
"""

from __future__ import annotations

from collections.abc import Iterator

import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor
from mindspore.dataset import vision

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import bert_arrays, enough_samples
from dlbench.data.layout import CROP_RATIO, CROP_SCALE, FLIP_PROB, MEAN, STD, TrainItem, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import BERT_KEYS, max_predictions, synthetic_bert, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError

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
    source = ds.GeneratorDataset(
        JpegBytes(items), ["image", "label"], shuffle=True, num_parallel_workers=workers, python_multiprocessing=False
    )  # reading bytes: threads suffice
    ops = [
        vision.Decode(),
        vision.RandomResizedCrop(
            side, scale=CROP_SCALE, ratio=CROP_RATIO, interpolation=vision.Inter.BILINEAR, max_attempts=10
        ),
        vision.RandomHorizontalFlip(FLIP_PROB),
        vision.Normalize([m * 255 for m in MEAN], [s * 255 for s in STD]),
        vision.HWC2CHW(),
    ]
    return _iterate(source.map(ops, input_columns="image", num_parallel_workers=workers), spec)


def text_batches(spec: PointSpec, case: Case) -> Iterator[Batch]:
    """Endless BERT batches (the loss Cell's inputs), cut to input_size columns, epoch after epoch."""
    assert isinstance(case.input, TextInput)
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size), "int32")
    enough_samples(len(arrays["nsp_labels"]), spec.batch_size, spec.data_dir)
    source = ds.NumpySlicesDataset(
        tuple(arrays[k] for k in BERT_KEYS),
        list(BERT_KEYS),
        shuffle=True,
        num_parallel_workers=spec.loader_workers or 1,
    )
    return _iterate(source, spec)


def batch_keys(case: Case) -> tuple[str, ...]:
    """A batch's arrays in the loss Cell's positional order."""
    if isinstance(case.input, ImageInput):
        return ("images", "labels")
    return ("input_ids", "labels") if case.task == "causal_lm" else BERT_KEYS


def as_tensors(case: Case, arrays: dict[str, np.ndarray]) -> Batch:
    """A batch's arrays as the loss Cell's positional Tensors: integers int32, floats float32."""
    return [
        Tensor(np.asarray(arrays[k], np.float32 if arrays[k].dtype.kind == "f" else np.int32)) for k in batch_keys(case)
    ]


def synthetic_batch(case: Case, batch: int, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch (dlbench.data.synthetic): images float32 and labels int32, BERT's arrays in BERT_KEYS
    order (integers int32, weights float32), or a decoder's tokens and next tokens (a sequence longer than its
    context is the point's refusal)."""
    if isinstance(case.input, ImageInput):
        return as_tensors(case, synthetic_images(case.input, batch, input_size, seed))
    assert isinstance(case.input, TextInput)
    if case.task != "causal_lm":
        return as_tensors(case, synthetic_bert(case.input, batch, input_size, seed))
    try:
        seq = sequence_length(case, input_size)
    except SpecError as exc:
        raise Unsupported(str(exc)) from None
    return as_tensors(case, synthetic_gpt(case.input, batch, seq, seed))


def batches(spec: PointSpec, case: Case) -> Iterator[Batch]:
    """The point's input: the learnable stream (--converge), the fixed synthetic batch, or the real-data
    pipeline's batches (spec.seed fixes the order, the shuffling and the augmentation)."""
    if spec.converge:
        return (as_tensors(case, a) for a in learnable_batches(case, spec.batch_size, spec.input_size, spec.seed))
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, spec.input_size, spec.seed))
    if case.task == "causal_lm":
        raise Unsupported(f"real data for {case.name} is not read yet: use synthetic data")
    ds.config.set_seed(spec.seed)
    return image_batches(spec, case) if isinstance(case.input, ImageInput) else text_batches(spec, case)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made once"
    return f"mindspore.dataset, {spec.loader_workers or 1} parallel workers, prefetch"


__all__ = ["as_tensors", "batch_keys", "batches", "describe", "synthetic_batch"]
