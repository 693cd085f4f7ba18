"""JAX real-data input (docs/data-layout.md) through Grain, the data loader the JAX and Flax docs recommend
(JAX has none of its own).

Images: PIL decode, random-resized-crop and flip in Grain's worker processes (``spec.loader_workers``; 0 =
in this process), each record's RNG derived by Grain from the seed and the record; uint8 NHWC batches go to
the device and are normalised there by a small jitted function. BERT: the rows of bert_samples.npz as int32.
Grain's IndexSampler reshuffles every epoch and cycles for as long as the protocol steps. On several
processes every rank shares one shuffle and reads its own shard of it (``ShardOptions(rank, world)``), so the
ranks' rows never overlap; each rank's rows are its part of the global batch sharded over the mesh.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dlbench.backends.base import InputFed
from dlbench.backends.jax.distributed import Placement
from dlbench.backends.jax.step import Batch, JaxTrainer, State, TrainStep
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
    image_root,
    read_train_list,
)
from dlbench.spec import PointSpec

PREFETCH = 2  # batches each Grain worker prepares ahead
Record = dict[str, np.ndarray]


class DecodeCropFlip(grain.transforms.RandomMap):  # type: ignore[misc]
    """(path, label) -> {"images": side x side x 3 uint8, "labels": int32}, augmented with Grain's per-record RNG."""

    def __init__(self, side: int) -> None:
        self.side = side

    def random_map(self, element: tuple[str, int], rng: np.random.Generator) -> Record:
        """Decode, random-resized-crop and flip one image."""
        path, label = element
        pixels = decode_crop_flip(path, self.side, *numpy_rng(rng), FLIP_PROB)
        return {"images": pixels, "labels": np.int32(label)}


class BertRows:
    """A random-access source over bert_samples.npz: row i of every array, by name."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[SAMPLE_ARRAYS[-1]])

    def __getitem__(self, index: int) -> Record:
        return {k: v[index] for k, v in self.arrays.items()}


def loader(source: Sequence[Any], operations: list[Any], spec: PointSpec, seed: int, rank: int,
           world: int) -> grain.DataLoader:
    """Shuffled (every epoch), endless batches of this rank's shard of the source, dropping partial batches."""
    enough_samples(len(source) // world, spec.batch_size, spec.data_dir)
    if not flags.FLAGS.is_parsed():  # grain 0.2.18 reads its absl flags; google/grain#1355, fixed after it
        flags.FLAGS.mark_as_parsed()
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, num_epochs=None, seed=seed)
    return grain.DataLoader(data_source=source, sampler=sampler,
                            operations=[*operations, grain.transforms.Batch(spec.batch_size, drop_remainder=True)],
                            worker_count=spec.loader_workers, worker_buffer_size=PREFETCH,
                            shard_options=grain.sharding.ShardOptions(rank, world, drop_remainder=True))


def image_batches(spec: PointSpec, case: Case, placement: Placement, seed: int) -> Iterator[Batch]:
    """Endless normalised NHWC float32 image batches, sharded over the mesh."""
    assert isinstance(case.input, ImageInput)
    side = spec.input_size or case.input.size
    items = [(str(i.path), i.label) for i in read_train_list(image_root(spec.data_dir or ""))]
    batches = loader(items, [DecodeCropFlip(side)], spec, seed, jax.process_index(), jax.process_count())
    mean = jnp.asarray(MEAN, jnp.float32) * 255
    std = jnp.asarray(STD, jnp.float32) * 255
    normalise = jax.jit(lambda x: (x.astype(jnp.float32) - mean) / std, out_shardings=placement.sharded)
    for batch in batches:
        on_device = placement.shard(batch)
        yield {"images": normalise(on_device["images"]), "labels": on_device["labels"]}


def text_batches(spec: PointSpec, placement: Placement, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP) as int32, sharded over the mesh."""
    rows = BertRows(bert_arrays(spec.data_dir or "", spec.input_size, dtype="int32"))
    for batch in loader(rows, [], spec, seed, jax.process_index(), jax.process_count()):
        yield placement.shard(batch)


class LoaderTrainer(InputFed, JaxTrainer):
    """A JaxTrainer whose batch comes from an iterator at every step (wait counted by InputFed)."""

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, state: State, train_step: TrainStep,
                 device: jax.Device) -> None:
        first = self.feed(source, warmup, steps)
        super().__init__(state, first, train_step, device)

    def step(self) -> None:
        self.batch = self.next_input()
        super().step()


def build_trainer(spec: PointSpec, case: Case, state: State, train_step: TrainStep, placement: Placement,
                  device: jax.Device) -> LoaderTrainer:
    """A trainer fed by the case's Grain loader (seed: the spec's; every rank reads its own shard)."""
    source = (image_batches(spec, case, placement, spec.seed) if isinstance(case.input, ImageInput)
              else text_batches(spec, placement, spec.seed))
    p = spec.protocol
    return LoaderTrainer(source, p.warmup, p.steps, state, train_step, device)


__all__ = ["LoaderTrainer", "build_trainer"]
