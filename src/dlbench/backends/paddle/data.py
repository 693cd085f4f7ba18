"""Paddle input: synthetic batches made once on the device (as tf_cnn_benchmarks does), and real data
(docs/data-layout.md) through a paddle.io.DataLoader with worker processes and prefetch. Never timed.

A batch is a dict of tensors in the order `models.loss_layer` takes them: images and labels, or
dlbench.data.synthetic.BERT_KEYS. Images: PIL decode, random-resized-crop and flip in the loader workers
(numpy's global RNG, which paddle reseeds per worker from the main process's), uint8 batches normalised on the
device. BERT: the samples of bert_samples.npz with the masked positions gathered (data.augment.bert_arrays).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import paddle

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, CtrInput, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data import augment, layout, synthetic
from dlbench.data.learnable import learnable_batches
from dlbench.spec import PointSpec, SpecError

PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead
Batch = dict[str, paddle.Tensor]


def synthetic_batch(
    case: Case, batch: int, input_size: int | None = None, seed: int = 0, data_format: str = "NCHW"
) -> Batch:
    """One fixed batch for the case (dlbench.data.synthetic) on paddle's current device; input_size shrinks the
    image side or the sequence length for quick tests; NHWC images are the NCHW batch transposed."""
    if isinstance(case.input, ImageInput):
        arrays = synthetic.synthetic_images(case.input, batch, input_size, seed)
        if data_format == "NHWC":
            arrays["images"] = np.ascontiguousarray(arrays["images"].transpose(0, 2, 3, 1))
    elif isinstance(case.input, CtrInput):
        arrays = synthetic.synthetic_ctr(case.input, batch, case.param("vocab"), seed)
    else:
        assert isinstance(case.input, TextInput)
        if case.task == "causal_lm":
            arrays = synthetic.synthetic_gpt(case.input, batch, _sequence(case, input_size), seed)
        else:
            arrays = synthetic.synthetic_bert(case.input, batch, input_size, seed)
    return {k: paddle.to_tensor(v) for k, v in arrays.items()}


def _sequence(case: Case, input_size: int | None) -> int:
    """A decoder's tokens per sample; a sequence longer than its context is the point's refusal."""
    try:
        return sequence_length(case, input_size)
    except SpecError as exc:
        raise Unsupported(str(exc)) from None


def learnable(spec: PointSpec, case: Case, seed: int, data_format: str = "NCHW") -> Iterator[Batch]:
    """--converge: the learnable stream (data/learnable.py, its order this rank's `seed`, as torch's) in the
    model's layout, each batch made a paddle tensor on the current device as it is drawn."""
    stream = learnable_batches(case, spec.batch_size, spec.input_size, seed, data_format == "NHWC")
    return ({k: paddle.to_tensor(v) for k, v in arrays.items()} for arrays in stream)


class ImageList(paddle.io.Dataset):
    """train_list.txt items, decoded and augmented to (side x side uint8 CHW array, int64 label)."""

    def __init__(self, items: list[layout.TrainItem], side: int) -> None:
        super().__init__()
        self.items, self.side = items, side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int64]:
        item = self.items[index]
        # numpy's global RNG
        pixels = augment.decode_crop_flip(item.path, self.side, *augment.numpy_rng(), layout.FLIP_PROB)
        return pixels.transpose(2, 0, 1).copy(), np.int64(item.label)


class BertSamples(paddle.io.Dataset):
    """Rows of a BERT batch's arrays, as a tuple in synthetic.BERT_KEYS order."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.arrays = [arrays[k] for k in synthetic.BERT_KEYS]

    def __len__(self) -> int:
        return len(self.arrays[-1])

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.arrays)


def _loader(dataset: paddle.io.Dataset, spec: PointSpec) -> paddle.io.DataLoader:
    augment.enough_samples(len(dataset), spec.batch_size, spec.data_dir)
    workers = spec.loader_workers
    return paddle.io.DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        prefetch_factor=PREFETCH_FACTOR,
        persistent_workers=workers > 0,
        return_list=True,
    )


def _to_device(t: paddle.Tensor, on_gpu: bool) -> paddle.Tensor:
    return t.cuda() if on_gpu else t


def image_batches(spec: PointSpec, case: Case, on_gpu: bool, data_format: str = "NCHW") -> Iterator[Batch]:
    """Endless normalised image batches on the device (NHWC: transposed there), epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    loader = _loader(ImageList(layout.read_train_list(layout.image_root(spec.data_dir or "")), side), spec)
    mean = _to_device(paddle.to_tensor(layout.MEAN, dtype="float32").reshape([1, 3, 1, 1]) * 255, on_gpu)
    std = _to_device(paddle.to_tensor(layout.STD, dtype="float32").reshape([1, 3, 1, 1]) * 255, on_gpu)
    while True:
        for images, labels in loader:
            x = (_to_device(images, on_gpu).astype("float32") - mean) / std
            x = x.transpose([0, 2, 3, 1]) if data_format == "NHWC" else x
            yield {"images": x, "labels": _to_device(labels, on_gpu).reshape([-1])}


def text_batches(spec: PointSpec, case: Case, on_gpu: bool) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP, BERT_KEYS) on the device, epoch after epoch."""
    assert isinstance(case.input, TextInput)
    predictions = synthetic.max_predictions(case.input, spec.input_size)
    arrays = augment.bert_arrays(spec.data_dir or "", spec.input_size, predictions)
    loader = _loader(BertSamples(arrays), spec)
    while True:
        for batch in loader:
            out = {k: _to_device(t, on_gpu) for k, t in zip(synthetic.BERT_KEYS, batch, strict=True)}
            out["nsp_labels"] = out["nsp_labels"].reshape([-1])
            yield out


def batches(spec: PointSpec, case: Case, on_gpu: bool, seed: int, data_format: str = "NCHW") -> Iterator[Batch]:
    """The point's input in the model's layout: the fixed synthetic batch, or the real-data loader's batches
    (seed: this rank's, which fixes the shuffling and the augmentation)."""
    if spec.converge:
        return learnable(spec, case, seed, data_format)
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, spec.input_size, seed, data_format))
    if isinstance(case.input, CtrInput) or case.task == "causal_lm":
        raise Unsupported(f"real data for {case.name} is not read yet: use synthetic data")
    np.random.seed(seed)  # paddle's sampler shuffles, and seeds each worker, from numpy's global RNG
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, on_gpu, data_format)
    return text_batches(spec, case, on_gpu)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch made on the device"
    return f"paddle.io.DataLoader, {spec.loader_workers} workers, prefetch {PREFETCH_FACTOR}"


__all__ = ["batches", "describe", "synthetic_batch"]
