"""JAX input: synthetic batches made once from dlbench.data.synthetic and put on the mesh, the learnable stream of
--converge, and real data (docs/data-layout.md) through Grain (real_data.py).

Grain and absl are imported only where real data is read (real_data.py, imported by `batches` for a real-data
point): a machine with JAX but without Grain (a GPU node whose image has JAX and none of the data loaders) runs
every synthetic point. Integers are int32 (JAX runs without 64-bit types).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import jax
import numpy as np

from dlbench.backends.base import Unsupported, fixed
from dlbench.backends.jax.distributed import Placement
from dlbench.cases import Case, CtrInput, ImageInput, LatentInput, TextInput, get_case
from dlbench.cases.arch import DlrmArch
from dlbench.cases.gpt import sequence_length
from dlbench.data.learnable import learnable_batches
from dlbench.data.recsys import CYCLED_BATCHES, synthetic_cycle, synthetic_dlrm
from dlbench.data.synthetic import synthetic_bert, synthetic_ctr, synthetic_gpt, synthetic_images, synthetic_latents
from dlbench.spec import PointSpec, SpecError

Record = dict[str, np.ndarray]
Batch = dict[str, jax.Array]


def host_arrays(arrays: dict[str, np.ndarray]) -> Record:
    """A batch's numpy arrays with 64-bit integers as int32 (JAX's default integer width)."""
    return {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in arrays.items()}


def synthetic_arrays(case: Case, batch: int, input_size: int | None, seed: int) -> Record:
    """One synthetic batch for the case as host arrays: NHWC images and labels, or BERT's gathered MLM batch."""
    if isinstance(case.input, ImageInput):
        return host_arrays(synthetic_images(case.input, batch, input_size, seed, channels_last=True))
    if isinstance(case.arch, DlrmArch):
        return host_arrays(synthetic_dlrm(case.arch, batch, seed))
    if isinstance(case.input, CtrInput):
        return host_arrays(synthetic_ctr(case.input, batch, case.param("vocab"), seed))
    if isinstance(case.input, LatentInput):  # a DiT's latents and text embeddings (cases/dit.py), NCHW
        return synthetic_latents(case.input, batch, input_size, seed)
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":
        try:
            seq = sequence_length(case, input_size)
        except SpecError as exc:
            raise Unsupported(str(exc)) from None
        return host_arrays(synthetic_gpt(case.input, batch, seq, seed))
    return host_arrays(synthetic_bert(case.input, batch, input_size, seed))


def batches(spec: PointSpec, case: Case, placement: Placement, seed: int) -> Iterator[Batch]:
    """The point's input on the mesh: the fixed synthetic batch (this rank's rows, seeded by `seed`), or the
    Grain loader's batches (one shuffle for every rank, seeded by the spec; each rank its own shard); with
    --converge the learnable stream (data/learnable.py, its order this rank's `seed`, as torch's), NHWC and int32,
    each batch put on the mesh as it is drawn."""
    if spec.converge:
        stream = learnable_batches(case, spec.batch_size, spec.input_size, seed, channels_last=True)
        return (placement.shard(host_arrays(b)) for b in stream)
    if spec.data != "real" and isinstance(case.arch, DlrmArch):  # fresh ids step to step, put on the device once
        cycle = [placement.shard(host_arrays(b)) for b in synthetic_cycle(case.arch, spec.batch_size, seed)]
        return itertools.cycle(cycle)
    if spec.data != "real":
        return fixed(placement.shard(synthetic_arrays(case, spec.batch_size, spec.input_size, seed)))
    if isinstance(case.input, CtrInput | LatentInput) or case.task == "causal_lm":
        raise Unsupported(
            f"real data for {case.name} is not read yet (no Criteo, tokenised-corpus or latent layout): use synthetic "
            "data"
        )
    from dlbench.backends.jax import real_data  # Grain and absl: only where real data is read

    if isinstance(case.input, ImageInput):
        return real_data.image_batches(spec, case, placement, spec.seed)
    return real_data.text_batches(spec, case, placement, spec.seed)


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    if spec.data != "real" and isinstance(get_case(spec.model).arch, DlrmArch):
        return f"synthetic: {CYCLED_BATCHES} batches put on the device, fed in turn"
    if spec.data != "real":
        return "synthetic: one batch put on the device"
    from dlbench.backends.jax.real_data import PREFETCH  # a real-data point: Grain is there

    return f"Grain DataLoader, {spec.loader_workers} workers, prefetch {PREFETCH}"


__all__ = ["Batch", "Record", "batches", "describe", "host_arrays", "synthetic_arrays"]
