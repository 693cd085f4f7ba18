"""Jittor input: a synthetic batch made once (dlbench.data.synthetic's arrays), or real data
(docs/data-layout.md) through a ``jittor.dataset.Dataset`` with worker processes.

A batch is a list of Vars: [images, labels], BERT's arrays in ``BERT_KEYS`` order (integers int32, the
masked-LM weights float32), or a decoder's [input_ids, labels] (int32; synthetic or learnable). --converge feeds
the learnable stream (data/learnable.py, the bytes torch's backend trains on), a new batch each step.

Images: Pillow decode, random-resized-crop and flip (``dlbench.data.augment.decode_crop_flip``, the crop every
backend shares) in Jittor's loader workers, drawing from numpy's global RNG, which ``jt.set_global_seed``
seeds in the training process and Jittor reseeds in each worker (seed ^ worker id). uint8 NCHW batches are
normalised to float32 on the device; labels are int32, as the synthetic batch has them. BERT: the rows of
bert_samples.npz, masked positions gathered (``bert_arrays``), as int32.

Shuffling: Jittor shuffles each epoch with a Generator of its own that it seeds with 1 whatever the global
seed; it is replaced here by one seeded with the spec seed. Each worker prefetches into a ring buffer of
shared memory (512 MiB by default); it is sized here to PREFETCH_PER_WORKER batches, because the pages a
worker fills count in the process tree's peak memory that the result records.
"""

from __future__ import annotations

from collections.abc import Iterator

import jittor as jt
import numpy as np
from jittor.dataset import Dataset

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import bert_arrays, decode_crop_flip, enough_samples, numpy_rng
from dlbench.data.layout import FLIP_PROB, MEAN, STD, TrainItem, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import BERT_KEYS, max_predictions, synthetic_bert, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError

PREFETCH_PER_WORKER = 2  # batches each worker's ring buffer holds ahead
RING_SLACK = 1 << 20  # bytes of pickling overhead a ring buffer holds besides the arrays
Batch = list[jt.Var]


class ImageList(Dataset):
    """train_list.txt items, decoded and augmented to (side x side uint8 CHW array, int32 label)."""

    def __init__(self, items: list[TrainItem], side: int) -> None:
        super().__init__()
        self.items, self.side = items, side
        self.sample_bytes = 3 * side * side + 4

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int32]:
        item = self.items[int(index)]
        pixels = decode_crop_flip(item.path, self.side, *numpy_rng(), FLIP_PROB)  # numpy's global RNG
        return np.ascontiguousarray(pixels.transpose(2, 0, 1)), np.int32(item.label)


class BertSamples(Dataset):
    """Rows of a BERT batch's arrays, in BERT_KEYS order: train_loss's inputs."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.arrays = [arrays[k] for k in BERT_KEYS]
        self.sample_bytes = sum(a[0].nbytes for a in self.arrays)

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return tuple(a[int(index)] for a in self.arrays)


def _configure(dataset: ImageList | BertSamples, n: int, spec: PointSpec) -> Dataset:
    """Batch, shuffle with the spec seed, drop each epoch's partial batch, and set the workers."""
    enough_samples(n, spec.batch_size, spec.data_dir)
    ring = PREFETCH_PER_WORKER * spec.batch_size * dataset.sample_bytes + RING_SLACK
    dataset.set_attrs(
        total_len=n,
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=spec.loader_workers,
        buffer_size=ring,
    )
    dataset._shuffle_rng = np.random.default_rng(spec.seed)  # Jittor's own is seeded with 1, always
    return dataset


def _endless(dataset: Dataset) -> Iterator[Batch]:
    """The dataset's batches, epoch after epoch (each iteration is one reshuffled epoch); closing it stops
    the workers."""
    try:
        while True:
            yield from dataset
    finally:
        dataset.terminate()


def _primed(source: Iterator[Batch]) -> Iterator[Batch]:
    """source with its first batch taken now (closing the result closes source)."""
    first = next(source)

    def again() -> Iterator[Batch]:
        yield first
        yield from source

    return again()


def _normalised(dataset: Dataset) -> Iterator[Batch]:
    mean = jt.array(np.array(MEAN, dtype=np.float32).reshape(1, 3, 1, 1) * 255)
    std = jt.array(np.array(STD, dtype=np.float32).reshape(1, 3, 1, 1) * 255)
    for images, labels in _endless(dataset):
        yield [(images.float32() - mean) / std, labels]


def learnable(spec: PointSpec, case: Case) -> Iterator[Batch]:
    """--converge: the learnable stream (its order the spec's seed, as torch's), each batch's arrays as Vars in the
    order train_loss takes them, integers int32."""
    keys = ("images", "labels") if isinstance(case.input, ImageInput) else ("input_ids", "labels")
    for arrays in learnable_batches(case, spec.batch_size, spec.input_size, spec.seed):
        yield [jt.array(arrays[k].astype(np.int32) if arrays[k].dtype.kind in "iu" else arrays[k]) for k in keys]


def synthetic_batch(case: Case, batch: int, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch (dlbench.data.synthetic): images float32 and labels int32, BERT's arrays in BERT_KEYS
    order (integers int32, weights float32), or a decoder's token ids and next-token labels (int32)."""
    if isinstance(case.input, ImageInput):
        arrays = synthetic_images(case.input, batch, input_size, seed)
        return [jt.array(arrays["images"]), jt.array(arrays["labels"].astype(np.int32))]
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":  # a decoder: [input_ids, next-token labels], int32
        try:
            tokens = synthetic_gpt(case.input, batch, sequence_length(case, input_size), seed)
        except SpecError as exc:  # a sequence longer than the case's context
            raise Unsupported(str(exc)) from None
        return [jt.array(tokens[k].astype(np.int32)) for k in ("input_ids", "labels")]
    bert = synthetic_bert(case.input, batch, input_size, seed)
    return [jt.array(bert[k] if bert[k].dtype == np.float32 else bert[k].astype(np.int32)) for k in BERT_KEYS]


def batches(spec: PointSpec, case: Case) -> Iterator[Batch]:
    """The point's input: the learnable stream (--converge), the fixed synthetic batch, or endless real batches
    (images as [float32 NCHW normalised, int32 labels], BERT as train_loss's inputs).

    A real loader's first batch is taken now, which starts its workers: call this before building the model,
    so that the forked workers do not inherit its memory (the worker's peak memory sums the process tree).
    """
    if spec.converge:
        return learnable(spec, case)
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, spec.input_size, spec.seed))
    if isinstance(case.input, ImageInput):
        items = read_train_list(image_root(spec.data_dir or ""))
        source = _normalised(_configure(ImageList(items, spec.input_size or case.input.size), len(items), spec))
    else:
        assert isinstance(case.input, TextInput)
        arrays = bert_arrays(
            spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size), "int32"
        )
        source = _endless(_configure(BertSamples(arrays), len(arrays["nsp_labels"]), spec))
    return _primed(source)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made once"
    workers = spec.loader_workers
    where = (
        f"{workers} worker processes, prefetch {PREFETCH_PER_WORKER} batches each"
        if workers
        else "in the training process"
    )
    return f"jittor.dataset, {where}"


__all__ = ["batches", "describe", "synthetic_batch"]
