"""JAX input: synthetic batches made once from dlbench.data.synthetic and put on the mesh, and real data
(docs/data-layout.md) through Grain, the data loader the JAX and Flax docs recommend (JAX has none of its own).

Images: PIL decode, random-resized-crop and flip in Grain's worker processes (``spec.loader_workers``; 0 =
in this process), each record's RNG derived by Grain from the seed and the record; uint8 NHWC batches go to
the device and are normalised there by a small jitted function. BERT: the rows of bert_samples.npz as int32,
the masked-LM labels gathered into positions, ids and weights. Grain's IndexSampler reshuffles every epoch and
cycles for as long as the protocol steps. On several processes every rank shares one shuffle and reads its own
shard of it (``ShardOptions(rank, world)``), so the ranks' rows never overlap; each rank's rows are its part of
the global batch sharded over the mesh. Integers are int32 (JAX runs without 64-bit types).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dlbench.backends.base import Unsupported, fixed
from dlbench.backends.jax.distributed import Placement
from dlbench.cases import Case, CtrInput, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import bert_arrays, decode_crop_flip, enough_samples, numpy_rng
from dlbench.data.layout import FLIP_PROB, MEAN, STD, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import max_predictions, synthetic_bert, synthetic_ctr, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError

PREFETCH = 2  # batches each Grain worker prepares ahead
Record = dict[str, np.ndarray]


class RandomAccess(Protocol):
    """What Grain reads records from: a length and records by index (a list, or BertRows)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


Batch = dict[str, jax.Array]


def host_arrays(arrays: dict[str, np.ndarray]) -> Record:
    """A batch's numpy arrays with 64-bit integers as int32 (JAX's default integer width)."""
    return {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in arrays.items()}


def synthetic_arrays(case: Case, batch: int, input_size: int | None, seed: int) -> Record:
    """One synthetic batch for the case as host arrays: NHWC images and labels, or BERT's gathered MLM batch."""
    if isinstance(case.input, ImageInput):
        return host_arrays(synthetic_images(case.input, batch, input_size, seed, channels_last=True))
    if isinstance(case.input, CtrInput):
        return host_arrays(synthetic_ctr(case.input, batch, case.param("vocab"), seed))
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":
        try:
            seq = sequence_length(case, input_size)
        except SpecError as exc:
            raise Unsupported(str(exc)) from None
        return host_arrays(synthetic_gpt(case.input, batch, seq, seed))
    return host_arrays(synthetic_bert(case.input, batch, input_size, seed))


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


def batches(spec: PointSpec, case: Case, placement: Placement, seed: int) -> Iterator[Batch]:
    """The point's input on the mesh: the fixed synthetic batch (this rank's rows, seeded by `seed`), or the
    Grain loader's batches (one shuffle for every rank, seeded by the spec; each rank its own shard); with
    --converge the learnable stream (data/learnable.py, its order this rank's `seed`, as torch's), NHWC and int32,
    each batch put on the mesh as it is drawn."""
    if spec.converge:
        stream = learnable_batches(case, spec.batch_size, spec.input_size, seed, channels_last=True)
        return (placement.shard(host_arrays(b)) for b in stream)
    if spec.data != "real":
        return fixed(placement.shard(synthetic_arrays(case, spec.batch_size, spec.input_size, seed)))
    if isinstance(case.input, ImageInput):
        return image_batches(spec, case, placement, spec.seed)
    if isinstance(case.input, CtrInput) or case.task == "causal_lm":
        raise Unsupported(
            f"real data for {case.name} is not read yet (no Criteo or tokenised-corpus layout): use synthetic data"
        )
    return text_batches(spec, case, placement, spec.seed)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real":
        return "synthetic: one batch put on the device"
    return f"Grain DataLoader, {spec.loader_workers} workers, prefetch {PREFETCH}"


__all__ = ["batches", "describe", "loader", "synthetic_arrays"]
