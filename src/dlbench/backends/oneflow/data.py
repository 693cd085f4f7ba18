"""OneFlow input: a synthetic batch made once on the device (dlbench.data.synthetic's arrays), or real data
(docs/data-layout.md) through OneFlow's own ``oneflow.utils.data.DataLoader`` with worker processes and prefetch.

Images: Pillow decode, random-resized-crop and flip (``dlbench.data.augment.decode_crop_flip``, the crop every
backend shares) in the loader's workers; uint8 NCHW batches are normalised to float32 on the device. The
augmentation draws from its own numpy Generator per sample, seeded by (spec seed, draw number): the sampler, in
the training process, yields (index, draw) pairs from a fresh permutation every epoch, so crops and shuffling
are fixed by the seed whatever the worker count (as the MXNet backend does it). BERT: the rows of
bert_samples.npz with the masked positions gathered (``bert_arrays``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import oneflow as flow
from oneflow.utils.data import DataLoader, Dataset, Sampler

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import AugmentedImages, bert_arrays, enough_samples
from dlbench.data.layout import MEAN, STD, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import max_predictions, synthetic_bert, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError

Batch = dict[str, flow.Tensor]
Draw = tuple[int, int]  # (sample index, draw number)
PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead


def _on(arrays: dict[str, np.ndarray], device: flow.device) -> Batch:
    return {k: flow.tensor(v, device=device) for k, v in arrays.items()}


def synthetic_batch(case: Case, batch: int, device: flow.device, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch for the case (dlbench.data.synthetic) on the device; input_size shrinks the image side or
    the sequence length for quick tests."""
    if isinstance(case.input, ImageInput):
        return _on(synthetic_images(case.input, batch, input_size, seed), device)
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":  # a decoder's next-token batch (#46)
        return _on(synthetic_gpt(case.input, batch, _sequence(case, input_size), seed), device)
    return _on(synthetic_bert(case.input, batch, input_size, seed), device)


def _sequence(case: Case, input_size: int | None) -> int:
    """A decoder's tokens per sample; a sequence longer than its context is the point's refusal."""
    try:
        return sequence_length(case, input_size)
    except SpecError as exc:
        raise Unsupported(str(exc)) from None


def learnable(spec: PointSpec, case: Case, device: flow.device, seed: int) -> Iterator[Batch]:
    """--converge: the learnable stream (data/learnable.py, its order this rank's `seed`, as torch's), each batch
    moved to the device as it is drawn."""
    return (_on(arrays, device) for arrays in learnable_batches(case, spec.batch_size, spec.input_size, seed))


class SeededDraws(Sampler):
    """One epoch per iteration: (index, draw) pairs in a permutation drawn from (seed, epoch)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def __iter__(self) -> Iterator[Draw]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = np.random.default_rng((self.seed, epoch)).permutation(self.n)
        return ((int(i), epoch * self.n + pos) for pos, i in enumerate(order))

    def __len__(self) -> int:
        return self.n


class ImageList(AugmentedImages, Dataset):
    """train_list.txt items, decoded and augmented (`AugmentedImages`), with int64 labels."""

    label_type = np.int64


class BertSamples(Dataset):
    """Rows of a BERT batch's arrays (dlbench.data.synthetic.BERT_KEYS), as a dict per sample."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.n = len(arrays["nsp_labels"])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, draw: Draw) -> dict[str, np.ndarray]:
        return {k: v[draw[0]] for k, v in self.arrays.items()}


def _loader(dataset: Dataset, spec: PointSpec, seed: int) -> DataLoader:
    enough_samples(len(dataset), spec.batch_size, spec.data_dir)
    workers = spec.loader_workers
    extra = {"prefetch_factor": PREFETCH_FACTOR, "persistent_workers": True} if workers else {}
    return DataLoader(
        dataset,
        batch_size=spec.batch_size,
        sampler=SeededDraws(len(dataset), seed),
        drop_last=True,
        num_workers=workers,
        **extra,
    )


def image_batches(spec: PointSpec, case: Case, device: flow.device, seed: int) -> Iterator[Batch]:
    """Endless normalised image batches on the device, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    loader = _loader(ImageList(read_train_list(image_root(spec.data_dir or "")), side, seed), spec, seed)
    mean = flow.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = flow.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    while True:
        for images, labels in loader:
            x = (images.to(device).to(flow.float32) - mean) / std
            yield {"images": x, "labels": labels.to(device)}


def text_batches(spec: PointSpec, case: Case, device: flow.device, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP) on the device, epoch after epoch."""
    assert isinstance(case.input, TextInput)
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size))
    loader = _loader(BertSamples(arrays), spec, seed)
    while True:
        for batch in loader:
            yield {k: v.to(device) for k, v in batch.items()}


def batches(spec: PointSpec, case: Case, device: flow.device, seed: int) -> Iterator[Batch]:
    """The point's input: the fixed synthetic batch, the learnable stream (--converge), or the real-data loader's
    batches (seed: this rank's)."""
    if spec.converge:
        return learnable(spec, case, device, seed)
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, device, spec.input_size, seed))
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, device, seed)
    if not isinstance(case.input, TextInput):
        raise Unsupported(f"real data for {case.name} is not read by the OneFlow backend: use synthetic data")
    return text_batches(spec, case, device, seed)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made on the device"
    if not spec.loader_workers:
        return "oneflow DataLoader, in the training process"
    return f"oneflow DataLoader, {spec.loader_workers} workers, prefetch {PREFETCH_FACTOR}"


__all__ = ["batches", "describe", "synthetic_batch"]
