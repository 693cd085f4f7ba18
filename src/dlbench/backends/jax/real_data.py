"""Real data (docs/data-layout.md) for JAX through Grain, the data loader the JAX and Flax docs recommend (JAX has
none of its own). Imported only for a real-data point (data.batches), so that Grain and absl are needed only there.

Images: PIL decode, random-resized-crop and flip in Grain's worker processes (``spec.loader_workers``; 0 =
in this process), each record's RNG derived by Grain from the seed and the record; uint8 NHWC batches go to
the device and are normalised there by a small jitted function. BERT: the rows of bert_samples.npz as int32,
the masked-LM labels gathered into positions, ids and weights. Grain's IndexSampler reshuffles every epoch and
cycles for as long as the protocol steps. On several processes every rank shares one shuffle and reads its own
shard of it (``ShardOptions(rank, world)``), so the ranks' rows never overlap; each rank's rows are its part of
the global batch sharded over the mesh.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dlbench.backends.jax.distributed import Placement
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.data.augment import bert_arrays, decode_crop_flip, enough_samples, numpy_rng
from dlbench.data.layout import FLIP_PROB, MEAN, STD, image_root, read_train_list
from dlbench.data.synthetic import max_predictions
from dlbench.spec import PointSpec

PREFETCH = 2  # batches each Grain worker prepares ahead
Record = dict[str, np.ndarray]
Batch = dict[str, jax.Array]


class RandomAccess(Protocol):
    """What Grain reads records from: a length and records by index (a list, or BertRows)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


class DecodeCropFlip(grain.transforms.RandomMap):
    """(path, label) -> {"images": side x side x 3 uint8, "labels": int32}, augmented with Grain's per-record RNG."""

    def __init__(self, side: int) -> None:
        self.side = side

    def random_map(self, element: tuple[str, int], rng: np.random.Generator) -> Record:
        """Decode, random-resized-crop and flip one image."""
        path, label = element
        pixels = decode_crop_flip(path, self.side, *numpy_rng(rng), FLIP_PROB)
        return {"images": pixels, "labels": np.asarray(label, dtype=np.int32)}


class BertRows:
    """A random-access source over a BERT batch's arrays (bert_samples.npz, gathered): row i of every array."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays["nsp_labels"])

    def __getitem__(self, index: int) -> Record:
        return {k: v[index] for k, v in self.arrays.items()}


def loader(
    source: RandomAccess, operations: list[Any], spec: PointSpec, seed: int, rank: int, world: int
) -> grain.DataLoader:
    """Shuffled (every epoch), endless batches of this rank's shard of the source, dropping partial batches."""
    enough_samples(len(source) // world, spec.batch_size, spec.data_dir)
    if not flags.FLAGS.is_parsed():  # grain 0.2.18 reads its absl flags; google/grain#1355, fixed after it
        flags.FLAGS.mark_as_parsed()
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, num_epochs=None, seed=seed)
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[*operations, grain.transforms.Batch(spec.batch_size, drop_remainder=True)],
        worker_count=spec.loader_workers,
        worker_buffer_size=PREFETCH,
        shard_options=grain.sharding.ShardOptions(rank, world, drop_remainder=True),
    )


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


def text_batches(spec: PointSpec, case: Case, placement: Placement, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP, masked positions gathered) as int32, sharded over the mesh."""
    assert isinstance(case.input, TextInput)
    predictions = max_predictions(case.input, spec.input_size)
    rows = BertRows(bert_arrays(spec.data_dir or "", spec.input_size, predictions, dtype="int32"))
    for batch in loader(rows, [], spec, seed, jax.process_index(), jax.process_count()):
        yield placement.shard(batch)


__all__ = ["PREFETCH", "BertRows", "DecodeCropFlip", "image_batches", "loader", "text_batches"]
