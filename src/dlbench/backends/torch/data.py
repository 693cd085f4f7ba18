"""PyTorch input: synthetic batches made once on the device (as tf_cnn_benchmarks does), and real data
(docs/data-layout.md) through a DataLoader with workers and prefetch.

Images: PIL decode, random-resized-crop and flip in the loader workers (torchvision is not used: it does not
import here), uint8 batches normalised on the device. BERT: the samples of bert_samples.npz.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, CtrInput, ImageInput, LatentInput, TextInput, get_case
from dlbench.cases.arch import DlrmArch
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import bert_arrays, decode_crop_flip, enough_samples
from dlbench.data.layout import FLIP_PROB, MEAN, STD, TrainItem, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.recsys import CYCLED_BATCHES, synthetic_cycle
from dlbench.data.synthetic import (
    max_predictions,
    synthetic_bert,
    synthetic_ctr,
    synthetic_gpt,
    synthetic_images,
    synthetic_latents,
)
from dlbench.spec import PointSpec, SpecError

Batch = dict[str, torch.Tensor]


def synthetic_batch(
    case: Case,
    batch: int,
    device: torch.device,
    input_size: int | None = None,
    seed: int = 0,
    channels_last: bool = False,
) -> Batch:
    """One fixed batch for the case (dlbench.data.synthetic), on the device; input_size shrinks the image side or
    the sequence length for quick tests."""
    if isinstance(case.input, ImageInput):
        arrays = synthetic_images(case.input, batch, input_size, seed)
        out = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
        if channels_last:
            out["images"] = out["images"].contiguous(memory_format=torch.channels_last)
        return out
    if isinstance(case.input, CtrInput):
        arrays = synthetic_ctr(case.input, batch, case.param("vocab"), seed)
        return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    if isinstance(case.input, LatentInput):  # the frozen encoders' outputs (cases/dit.py)
        arrays = synthetic_latents(case.input, batch, input_size, seed)
        return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":
        try:
            seq = sequence_length(case, input_size)
        except SpecError as exc:
            raise Unsupported(str(exc)) from None
        return {k: torch.from_numpy(v).to(device) for k, v in synthetic_gpt(case.input, batch, seq, seed).items()}
    arrays = synthetic_bert(case.input, batch, input_size, seed)
    if every_token_real(arrays):  # no mask at all: scaled_dot_product_attention may then pick a fused kernel
        del arrays["attention_mask"]
    return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}


def every_token_real(arrays: dict[str, np.ndarray]) -> bool:
    """Whether a BERT batch's attention mask (on the host, read before the copy) attends to every token."""
    mask = arrays.get("attention_mask")
    return mask is not None and bool(np.all(mask == 1))


PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead


def _uniform(lo: float, hi: float) -> float:
    """torch's RNG, which DataLoader seeds per worker (numpy's it does not)."""
    return float(torch.empty(1).uniform_(lo, hi))


def _randint(lo: int, hi: int) -> int:
    return int(torch.randint(lo, hi, (1,)))


class ImageList(Dataset[tuple[torch.Tensor, int]]):
    """train_list.txt items, decoded and augmented to side x side uint8 CHW tensors."""

    def __init__(self, items: list[TrainItem], side: int) -> None:
        self.items, self.side = items, side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        item = self.items[index]
        pixels = decode_crop_flip(item.path, self.side, _uniform, _randint, FLIP_PROB)
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1), item.label


class BertSamples(Dataset[Batch]):
    """Rows of a BERT batch's arrays (dlbench.data.synthetic.BERT_KEYS) as tensors."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = {k: torch.from_numpy(v) for k, v in arrays.items()}
        self.n = len(self.arrays["nsp_labels"])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Batch:
        return {k: v[index] for k, v in self.arrays.items()}


def _loader(dataset: Dataset[Any], spec: PointSpec, device: torch.device, seed: int) -> DataLoader[Any]:
    enough_samples(len(dataset), spec.batch_size, spec.data_dir)  # type: ignore[arg-type]
    workers = spec.loader_workers
    return DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        prefetch_factor=PREFETCH_FACTOR if workers else None,
        persistent_workers=workers > 0,
        pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(seed),
    )


def image_batches(spec: PointSpec, case: Case, device: torch.device, seed: int) -> Iterator[Batch]:
    """Endless normalised image batches on the device, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    loader = _loader(ImageList(read_train_list(image_root(spec.data_dir or "")), side), spec, device, seed)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    while True:
        for images, labels in loader:
            x = images.to(device, non_blocking=True).float().sub_(mean).div_(std)
            if spec.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield {"images": x, "labels": labels.to(device, non_blocking=True)}


def text_batches(spec: PointSpec, case: Case, device: torch.device, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP) on the device, epoch after epoch."""
    assert isinstance(case.input, TextInput)
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size))
    loader = _loader(BertSamples(arrays), spec, device, seed)
    while True:
        for batch in loader:
            yield {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def batches(spec: PointSpec, case: Case, device: torch.device, seed: int) -> Iterator[Batch]:
    """The point's input: the fixed synthetic batch, or the real-data loader's batches (seed: this rank's); with
    --converge the learnable stream (data/learnable.py), each batch moved to the device as it is drawn."""
    if spec.converge:
        stream = learnable_batches(case, spec.batch_size, spec.input_size, seed, spec.channels_last)
        return ({k: torch.from_numpy(v).to(device) for k, v in b.items()} for b in stream)
    if spec.data != "real" and isinstance(case.arch, DlrmArch):  # fresh ids step to step, made once on the device
        cycle = synthetic_cycle(case.arch, spec.batch_size, seed)
        return itertools.cycle([{k: torch.from_numpy(v).to(device) for k, v in b.items()} for b in cycle])
    if spec.data != "real":
        return fixed(synthetic_batch(case, spec.batch_size, device, spec.input_size, seed, spec.channels_last))
    if case.task == "face_recognition":
        raise Unsupported(f"real data for {case.name} is not read yet (no aligned-face layout): use synthetic data")
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, device, seed)
    if case.task in ("causal_lm", "ctr", "text_to_image"):
        raise Unsupported(f"real data for {case.name} is not read yet (no tokenised corpus layout): use synthetic data")
    return text_batches(spec, case, device, seed)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real" and isinstance(get_case(spec.model).arch, DlrmArch):
        return f"synthetic: {CYCLED_BATCHES} batches made on the device, fed in turn"
    if spec.data != "real":
        return "synthetic: one batch made on the device"
    return f"DataLoader, {spec.loader_workers} workers, prefetch {PREFETCH_FACTOR}"
