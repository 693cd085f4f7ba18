"""MXNet input: a synthetic batch made once on the device (dlbench.data.synthetic's arrays), or real data
(docs/data-layout.md) through a ``mx.gluon.data.DataLoader`` with worker processes and prefetch.

A batch is a list of NDArrays, the loss block's positional inputs: [images, labels], or BERT's arrays in
``BERT_KEYS`` order. Everything is float32, as Gluon takes it (token ids below 2**24 are exact).

Images: Pillow decode, random-resized-crop and flip (``dlbench.data.augment.decode_crop_flip``, the crop every
backend shares) in the loader's worker processes; gluon's own ``transforms.RandomResizedCrop`` is not used: it
decodes with OpenCV and, when its ten tries fail, falls back differently, so its crops would not match the
other backends'. uint8 NCHW batches are normalised to float32 on the device.

Gluon's worker pool is a plain ``multiprocessing.Pool`` that does not reseed numpy per worker, so the
augmentation does not draw from numpy's global RNG (every forked worker would draw the same crops). Instead
the sampler, in the training process, yields (image index, draw number) pairs: a fresh permutation from the
spec seed every epoch, and a running draw number that seeds each sample's own Generator. Crops and shuffling
are thus fixed by the seed, whatever the worker count.

BERT: the rows of bert_samples.npz with the masked positions gathered (``bert_arrays``), as float32. Labels stay
float32 too, as ``SoftmaxCrossEntropyLoss`` and ``pick`` take them.

``--converge`` (#44): the learnable stream (data/learnable.py, the bytes torch draws, in its order), a new
[images, labels] batch made on the device each step; image classifiers only (analysis/targets.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import mxnet as mx
import numpy as np
from mxnet import gluon

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.data.augment import AugmentedImages, bert_arrays, enough_samples
from dlbench.data.layout import MEAN, STD, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import BERT_KEYS, max_predictions, synthetic_bert, synthetic_images
from dlbench.spec import PointSpec

PREFETCH_PER_WORKER = 2  # batches each loader worker prepares ahead (gluon's own default)
Batch = list[mx.nd.NDArray]
Draw = tuple[int, int]  # (sample index, draw number)


class SeededDraws(gluon.data.Sampler):
    """One epoch per iteration: (index, draw) pairs in a permutation drawn from (seed, epoch)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def __iter__(self) -> Iterator[Draw]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = np.random.default_rng((self.seed, epoch)).permutation(self.n)
        return ((int(i), epoch * self.n + pos) for pos, i in enumerate(order))

    def __len__(self) -> int:
        return self.n


class ImageList(AugmentedImages, gluon.data.Dataset):
    """train_list.txt items, decoded and augmented (`AugmentedImages`), with float32 labels, as gluon's losses take them."""

    label_type = np.float32


class BertSamples(gluon.data.Dataset):
    """Rows of a BERT batch's arrays (float32), in BERT_KEYS order: the loss block's inputs."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = [arrays[k] for k in BERT_KEYS]

    def __len__(self) -> int:
        return len(self.arrays[-1])

    def __getitem__(self, draw: Draw) -> tuple[np.ndarray, ...]:
        return tuple(a[draw[0]] for a in self.arrays)


def _loader(dataset: gluon.data.Dataset, spec: PointSpec) -> gluon.data.DataLoader:
    enough_samples(len(dataset), spec.batch_size, spec.data_dir)
    sampler = gluon.data.BatchSampler(SeededDraws(len(dataset), spec.seed), spec.batch_size, "discard")
    workers = spec.loader_workers
    return gluon.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=workers, prefetch=PREFETCH_PER_WORKER * workers, thread_pool=False
    )


def _endless(loader: gluon.data.DataLoader) -> Iterator[Batch]:
    """The loader's batches, epoch after epoch (each iteration of the loader is one reshuffled epoch)."""
    while True:
        yield from loader


def _normalised(loader: gluon.data.DataLoader, ctx: mx.Context) -> Iterator[Batch]:
    mean = mx.nd.array(MEAN, ctx=ctx).reshape((1, 3, 1, 1)) * 255
    std = mx.nd.array(STD, ctx=ctx).reshape((1, 3, 1, 1)) * 255
    for images, labels in _endless(loader):
        x = mx.nd.broadcast_div(mx.nd.broadcast_sub(images.as_in_context(ctx).astype("float32"), mean), std)
        yield [x, labels.as_in_context(ctx)]


def _on_device(loader: gluon.data.DataLoader, ctx: mx.Context) -> Iterator[Batch]:
    for batch in _endless(loader):
        yield [t.as_in_context(ctx) for t in batch]


def synthetic_batch(case: Case, batch: int, ctx: mx.Context, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch (dlbench.data.synthetic) on ctx, as the loss block's positional inputs (float32)."""
    if isinstance(case.input, ImageInput):
        arrays = synthetic_images(case.input, batch, input_size, seed)
        ordered = [arrays["images"], arrays["labels"]]
    else:
        assert isinstance(case.input, TextInput)
        bert = synthetic_bert(case.input, batch, input_size, seed)
        ordered = [bert[k] for k in BERT_KEYS]
    return [mx.nd.array(a, ctx=ctx, dtype="float32") for a in ordered]


def learnable(spec: PointSpec, case: Case, ctx: mx.Context) -> Iterator[Batch]:
    """--converge: the learnable stream (its order the spec's seed, as torch's on one device), each batch made
    [float32 NCHW images, float32 labels] on ctx as it is drawn (image classifiers: the loss block's inputs)."""
    if not isinstance(case.input, ImageInput):
        raise Unsupported(f"MXNet's --converge feeds image classifiers only, not {case.name}")
    stream = learnable_batches(case, spec.batch_size, spec.input_size, spec.seed)
    return ([mx.nd.array(a[k], ctx=ctx, dtype="float32") for k in ("images", "labels")] for a in stream)


def batches(spec: PointSpec, case: Case, ctx: mx.Context) -> Iterator[Batch]:
    """The point's input on ctx: the fixed synthetic batch, the learnable stream (--converge), or endless real
    batches (images as [float32 NCHW normalised, labels], BERT as the loss block's inputs).

    A real loader (and its worker pool) is made now: call this before building the model, so that the forked
    workers do not inherit the model's memory (the worker's peak memory sums the whole process tree).
    """
    if spec.converge:
        return learnable(spec, case, ctx)
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, ctx, spec.input_size, spec.seed))
    if isinstance(case.input, ImageInput):
        side = spec.input_size or case.input.size
        items = read_train_list(image_root(spec.data_dir or ""))
        return _normalised(_loader(ImageList(items, side, spec.seed), spec), ctx)
    assert isinstance(case.input, TextInput)
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size), "float32")
    return _on_device(_loader(BertSamples(arrays), spec), ctx)


def describe(spec: PointSpec) -> str:
    """The loader as recorded in a result's extra facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made on the device"
    workers = spec.loader_workers
    if not workers:
        return "gluon DataLoader, in the training process"
    return f"gluon DataLoader, {workers} worker processes, prefetch {PREFETCH_PER_WORKER * workers} batches"


__all__ = ["batches", "describe", "learnable", "synthetic_batch"]
