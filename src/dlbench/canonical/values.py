"""The canonical weights and batch of a case, drawn from a seed with numpy alone, and the case as the same-model
check trains it (dropout 0, plain SGD at a fixed learning rate).

Every tensor is drawn from its own stream, seeded by (seed, crc32 of its name), so a tensor's values do not depend
on which others exist. The values are not an initialisation recipe: they are chosen so that every mapping mistake
shows (biases and norm shifts are nonzero, norm scales are not 1, running statistics are neither 0 nor 1) while
activations stay of order one (conv and dense weights scaled by their fan-in).

The last norm of each ResNet residual branch is drawn near 0.1, not 1 (Goyal et al.'s zero-initialised residual
γ, kept nonzero so that every tensor still has a gradient): with full-size branches a BatchNorm ResNet at random
weights is chaotic, and float32 alone moves its gradients by a few percent (torch float32 against float64 at
ResNet-50, batch 2, 64 px: 3.5% median over the tensors; 4e-6 with the small γ), which would drown what the check
looks for.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Any, TypeVar

import numpy as np

from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case, CtrInput, ImageInput, Optimizer, TextInput
from dlbench.cases.arch import Arch, BertConfig, MoeConfig
from dlbench.cases.wide_deep import ctr_input, wide_deep_arch
from dlbench.data.synthetic import synthetic_bert, synthetic_ctr, synthetic_gpt, synthetic_images

A = TypeVar("A", bound=Any)  # an architecture dataclass

# The check's learning rate. The step's change is read back from float32 weights (w1 - w0): a large rate keeps it
# far above float32's rounding of w, so that the comparison sees the gradient and not the rounding.
CHECK_LR = 1.0


def _draw(t: Tensor, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
    normal = rng.standard_normal(t.shape)
    if t.role == "conv":
        fan_in = math.prod(t.shape[1:])
        return normal * math.sqrt(2.0 / fan_in)
    if t.role == "linear":
        return normal * math.sqrt(1.0 / t.shape[1])
    if t.role == "norm_weight":
        return 1.0 + 0.1 * normal
    if t.role == "residual_norm_weight":
        return 0.1 * (1.0 + 0.1 * normal)
    if t.role == "running_var":
        return rng.uniform(0.5, 1.5, t.shape)
    if t.role == "running_mean":
        return 0.1 * normal
    return 0.05 * normal  # biases, norm shifts, embeddings, other vectors


def weights(case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    """Every canonical tensor of the case (float32, canonical layout), drawn from the seed."""
    return {t.name: _draw(t, seed).astype(np.float32) for t in tensors(case)}


def _bert_batch(text: TextInput, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """BERT's synthetic batch with padding exercised: the last row ends in 3 padding tokens (id 0, mask 0) that
    no prediction reads, and its last prediction slot is padding (weight 0)."""
    out = synthetic_bert(text, batch, seq, seed)
    ids, mask = out["input_ids"], out["attention_mask"]
    ids[ids == 0] = 1  # id 0 only where it is padding
    pad = min(3, seq // 4)
    if pad:
        ids[-1, -pad:] = 0
        mask[-1, -pad:] = 0
        real = np.arange(1, seq - pad)
        p = out["mlm_positions"].shape[1]
        chosen = np.sort(np.random.default_rng(seed + 1).choice(real, size=min(p, len(real)), replace=False))
        out["mlm_positions"][-1, : len(chosen)] = chosen
        out["mlm_ids"][-1, : len(chosen)] = ids[-1, chosen]
        out["mlm_weights"][-1, : len(chosen)] = 1.0
    out["mlm_positions"][-1, -1], out["mlm_ids"][-1, -1], out["mlm_weights"][-1, -1] = 0, 0, 0.0
    return out


def batch(case: Case, size: int, input_size: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """The canonical batch of `size` samples: images NCHW float32, token ids int64, CTR features (numpy only)."""
    inp = case.input
    if isinstance(inp, ImageInput):
        return synthetic_images(inp, size, input_size, seed)
    if isinstance(inp, TextInput) and isinstance(case.arch, BertConfig):
        seq = input_size or inp.seq_len
        return _bert_batch(inp, size, seq, seed)
    if isinstance(inp, TextInput):
        return synthetic_gpt(inp, size, input_size, seed)
    if isinstance(inp, CtrInput):
        return synthetic_ctr(ctr_input(case), size, wide_deep_arch(case).vocab, seed)
    raise TypeError(f"{case.name}: no canonical batch for {type(inp).__name__}")


def _no_dropout(arch: A) -> A:
    fields = {f.name: 0.0 for f in dataclasses.fields(arch) if "dropout" in f.name}
    return dataclasses.replace(arch, **fields) if fields else arch


def check_case(case: Case, lr: float = CHECK_LR) -> Case:
    """The case as the check trains it: every dropout rate 0 and plain SGD (no momentum, no weight decay) at a
    fixed learning rate, the same at any batch, and embedding tables with dense gradients (Wide & Deep's sparse 0:
    the same update). The architecture and loss are the case's own."""
    if any(p.name == "sparse" for p in case.params):  # dense embedding gradients: torch's sparse path pairs its
        case = case.configured({**dict(case.values), "sparse": 0})  # tables with SparseAdam whatever the case says
    arch: Arch = case.arch
    if isinstance(arch, MoeConfig):
        arch = dataclasses.replace(arch, base=_no_dropout(arch.base))
    return dataclasses.replace(case, arch=_no_dropout(arch), optimizer=Optimizer("sgd", lr))


__all__ = ["CHECK_LR", "batch", "check_case", "weights"]
