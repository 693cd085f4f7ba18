"""MegEngine input: a synthetic batch made once on the device (dlbench.data.synthetic's arrays), or real data
(docs/data-layout.md) through ``megengine.data.DataLoader`` with worker processes.

Images: Pillow decode, random-resized-crop and flip (``dlbench.data.augment.decode_crop_flip``, the crop every
backend shares) in the loader's workers; uint8 NCHW batches are normalised to float32 on the device. The
augmentation draws from its own numpy Generator per sample, seeded by (spec seed, draw number): the sampler, in
the training process, yields (index, draw) pairs from a fresh permutation every epoch, so crops and shuffling are
fixed by the seed whatever the worker count (as the MXNet and OneFlow backends do it). BERT: the rows of
bert_samples.npz with the masked positions gathered (``bert_arrays``), token ids as int32 (MegEngine's index
type). ``--converge`` (#44): the learnable stream (data/learnable.py, the bytes torch draws, in its order), a new
batch made on the device each step; image classifiers only (analysis/targets.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import megengine as mge
import numpy as np
from megengine.data import DataLoader, MapSampler
from megengine.data.dataset import Dataset

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.data.augment import AugmentedImages, bert_arrays, enough_samples
from dlbench.data.layout import MEAN, STD, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import BERT_KEYS, max_predictions, synthetic_bert, synthetic_images
from dlbench.spec import PointSpec

Batch = dict[str, mge.Tensor]
Draw = tuple[int, int]  # (sample index, draw number)


def _int32(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Integer arrays as int32 (MegEngine indexes and embeds with int32), the rest as they are."""
    return {k: v.astype(np.int32) if np.issubdtype(v.dtype, np.integer) else v for k, v in arrays.items()}


def _on(arrays: dict[str, np.ndarray], device: str) -> Batch:
    return {k: mge.tensor(v, device=device) for k, v in _int32(arrays).items()}


def synthetic_batch(case: Case, batch: int, device: str, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch for the case (dlbench.data.synthetic) on the device; input_size shrinks the image side or
    the sequence length for quick tests."""
    if isinstance(case.input, ImageInput):
        return _on(synthetic_images(case.input, batch, input_size, seed), device)
    assert isinstance(case.input, TextInput)
    return _on(synthetic_bert(case.input, batch, input_size, seed), device)


class SeededDraws(MapSampler):
    """Batches of (index, draw) pairs, one epoch per call of `sample`, in a permutation drawn from (seed, epoch)."""

    def __init__(self, dataset: Dataset, batch_size: int, seed: int) -> None:
        super().__init__(dataset, batch_size, drop_last=True, world_size=1, rank=0, seed=seed)
        self.n, self.seed, self.epoch = len(dataset), seed, 0

    def sample(self) -> list[Draw]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = np.random.default_rng((self.seed, epoch)).permutation(self.n)
        return [(int(i), epoch * self.n + pos) for pos, i in enumerate(order)]


class ImageList(AugmentedImages, Dataset):
    """train_list.txt items, decoded and augmented (`AugmentedImages`), with int32 labels."""

    label_type = np.int32


class BertSamples(Dataset):
    """Rows of a BERT batch's arrays, in BERT_KEYS order."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = [arrays[k] for k in BERT_KEYS]

    def __len__(self) -> int:
        return len(self.arrays[-1])

    def __getitem__(self, draw: Draw) -> tuple[np.ndarray, ...]:
        return tuple(a[draw[0]] for a in self.arrays)


def _loader(dataset: Dataset, spec: PointSpec) -> DataLoader:
    enough_samples(len(dataset), spec.batch_size, spec.data_dir)
    return DataLoader(
        dataset, sampler=SeededDraws(dataset, spec.batch_size, spec.seed), num_workers=spec.loader_workers
    )


def image_batches(spec: PointSpec, case: Case, device: str, seed: int) -> Iterator[Batch]:
    """Endless normalised image batches on the device, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    loader = _loader(ImageList(read_train_list(image_root(spec.data_dir or "")), side, seed), spec)
    mean = mge.tensor(np.array(MEAN, np.float32).reshape(1, 3, 1, 1) * 255, device=device)
    std = mge.tensor(np.array(STD, np.float32).reshape(1, 3, 1, 1) * 255, device=device)
    while True:
        for images, labels in loader:
            x = (mge.tensor(images, device=device).astype("float32") - mean) / std
            yield {"images": x, "labels": mge.tensor(labels, device=device)}


def text_batches(spec: PointSpec, case: Case, device: str) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP) on the device, epoch after epoch."""
    assert isinstance(case.input, TextInput)
    arrays = _int32(bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size)))
    loader = _loader(BertSamples(arrays), spec)
    while True:
        for batch in loader:
            yield {k: mge.tensor(v, device=device) for k, v in zip(BERT_KEYS, batch)}


def learnable(spec: PointSpec, case: Case, device: str) -> Iterator[Batch]:
    """--converge: the learnable stream (its order the spec's seed, as torch's on one device), each batch moved to
    the device as it is drawn (labels int32)."""
    return (_on(arrays, device) for arrays in learnable_batches(case, spec.batch_size, spec.input_size, spec.seed))


def batches(spec: PointSpec, case: Case, device: str) -> Iterator[Batch]:
    """The point's input: the fixed synthetic batch, the learnable stream (--converge), or the real-data loader's
    batches.

    A real loader's worker processes start on first use, after the model exists; the worker's peak memory sums
    the process tree."""
    if spec.converge:
        return learnable(spec, case, device)
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, device, spec.input_size, spec.seed))
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, device, spec.seed)
    if not isinstance(case.input, TextInput):
        raise Unsupported(f"real data for {case.name} is not read by the MegEngine backend: use synthetic data")
    return text_batches(spec, case, device)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made on the device"
    if not spec.loader_workers:
        return "megengine DataLoader, in the training process"
    return f"megengine DataLoader, {spec.loader_workers} worker processes"


__all__ = ["batches", "describe", "learnable", "synthetic_batch"]
