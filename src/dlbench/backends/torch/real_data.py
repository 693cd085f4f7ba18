"""PyTorch real-data input (docs/data-layout.md): a DataLoader with workers and prefetch.

Images: PIL decode, random-resized-crop and flip in the loader workers (torchvision is not used: it does not
import here), uint8 batches normalised on the device. BERT: the samples of bert_samples.npz. The trainer
takes a batch from the iterator at each step and counts the time spent waiting in next().
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from dlbench.backends.torch.step import TorchTrainer
from dlbench.cases import Case, ImageInput
from dlbench.data.layout import (CROP_RATIO, CROP_SCALE, FLIP_PROB, MEAN, SAMPLE_ARRAYS, SAMPLES, STD,
                                 DataLayoutError, TrainItem, image_root, read_train_list, text_root)
from dlbench.spec import PointSpec

PREFETCH_FACTOR = 2  # batches each loader worker prepares ahead
Batch = dict[str, torch.Tensor]


def crop_box(width: int, height: int) -> tuple[int, int, int, int]:
    """Random-resized-crop box (left, top, right, bottom): torchvision's algorithm, drawn with torch's RNG."""
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * float(torch.empty(1).uniform_(*CROP_SCALE))
        aspect = math.exp(float(torch.empty(1).uniform_(log_lo, log_hi)))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,)))
            left = int(torch.randint(0, width - w + 1, (1,)))
            return left, top, left + w, top + h
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        w, h = int(round(height * CROP_RATIO[1])), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


class ImageList(Dataset[tuple[torch.Tensor, int]]):
    """train_list.txt items, decoded and augmented to side x side uint8 CHW tensors."""

    def __init__(self, items: list[TrainItem], side: int) -> None:
        self.items, self.side = items, side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        item = self.items[index]
        with Image.open(item.path) as src:
            img = src.convert("RGB")
        img = img.resize((self.side, self.side), Image.Resampling.BILINEAR, box=crop_box(*img.size))
        if float(torch.rand(1)) < FLIP_PROB:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        return pixels.view(self.side, self.side, 3).permute(2, 0, 1), item.label


class BertSamples(Dataset[Batch]):
    """Rows of bert_samples.npz as int64 tensors, cut to the first seq_len columns."""

    def __init__(self, arrays: dict[str, np.ndarray], seq_len: int) -> None:
        self.arrays = {k: torch.from_numpy(v[:, :seq_len] if v.ndim == 2 else v).long() for k, v in arrays.items()}
        self.n = len(self.arrays["nsp_labels"])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Batch:
        return {k: v[index] for k, v in self.arrays.items()}


def _loader(dataset: Dataset[Any], spec: PointSpec, device: torch.device, seed: int) -> DataLoader[Any]:
    n = len(dataset)  # type: ignore[arg-type]
    if n < spec.batch_size:
        raise DataLayoutError(f"{spec.data_dir} holds {n} samples, fewer than the batch size {spec.batch_size}: "
                              "make more with `dlbench data`")
    workers = spec.loader_workers
    return DataLoader(dataset, batch_size=spec.batch_size, shuffle=True, drop_last=True, num_workers=workers,
                      prefetch_factor=PREFETCH_FACTOR if workers else None, persistent_workers=workers > 0,
                      pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(seed))


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
    root = text_root(spec.data_dir or "")
    with np.load(root / SAMPLES) as npz:
        missing = set(SAMPLE_ARRAYS) - set(npz.files)
        if missing:
            raise DataLayoutError(f"{root / SAMPLES} lacks {', '.join(sorted(missing))}")
        arrays = {k: npz[k] for k in SAMPLE_ARRAYS}
    seq = min(spec.input_size or arrays["input_ids"].shape[1], arrays["input_ids"].shape[1])
    loader = _loader(BertSamples(arrays, seq), spec, device, seed)
    while True:
        for batch in loader:
            yield {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def batches(spec: PointSpec, case: Case, device: torch.device, seed: int) -> Iterator[Batch]:
    """The case's real-data batches: images or BERT samples."""
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, device, seed)
    return text_batches(spec, case, device, seed)


class LoaderTrainer(TorchTrainer):
    """A TorchTrainer whose batch comes from an iterator at every step.

    It counts the time spent waiting in next() during measured steps only: the protocol runs, per repeat,
    `warmup` untimed steps then `steps` timed ones, so step k after reset_input_wait() is timed when
    k mod (warmup + steps) >= warmup. The first batch is taken at build time, never timed.
    """

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, case: Case, model: torch.nn.Module,
                 device: torch.device, precision: str, compile_model: bool, **kwargs: Any) -> None:
        self.source = source
        self.cycle, self.warmup = warmup + steps, warmup
        self.waited, self.taken = 0.0, 0
        super().__init__(case, model, next(source), device, precision, compile_model, **kwargs)

    def step(self) -> None:
        start = time.perf_counter()
        self.batch = next(self.source)
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


def build_trainer(spec: PointSpec, case: Case, model: torch.nn.Module, device: torch.device, seed: int,
                  **kwargs: Any) -> LoaderTrainer:
    """A trainer fed by the case's real-data loader (seed: this rank's shuffling seed)."""
    p = spec.protocol
    return LoaderTrainer(batches(spec, case, device, seed), p.warmup, p.steps, case, model, device,
                         spec.precision, spec.compile, **kwargs)
