"""Named, documented deviations: where a framework itself computes something differently from torch (its own
kernel or convention, not a dlbench backend's choice), so that the same-model check cannot call it a failure.

A deviation covers some tensors of some frameworks; the check leaves those tensors out of its verdict and shows
their figure beside the deviation's name, so that the difference stays visible (docs/frameworks.md lists them).
A difference that a backend could remove is fixed in the backend instead, with the test that caught it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# (w0, torch's change, the framework's change) of one tensor -> why the deviation does not explain the
# difference, or None when it does.
Explains = Callable[[np.ndarray, np.ndarray, np.ndarray], str | None]
TORCH_BN_MOMENTUM = 0.1  # every backend's BatchNorm momentum, in torch's sense (running_mean's comparison checks it)
MAX_VALUES = 10_000_000  # values per channel a batch can have (batch x height x width), to tell n from rounding


@dataclass(frozen=True)
class Deviation:
    """A framework convention that makes some tensors differ from torch's, with why, and a test that the difference
    is exactly the one the convention predicts (else the tensor is judged as any other)."""

    name: str
    frameworks: frozenset[str]
    tensors: str  # a regular expression over canonical names
    why: str
    explains: Explains

    def covers(self, framework: str, tensor: str) -> bool:
        """Whether this deviation explains a difference in `tensor` (a canonical name) for `framework`."""
        return framework in self.frameworks and re.search(self.tensors, tensor) is not None


def biased_variance(w0: np.ndarray, ref: np.ndarray, got: np.ndarray) -> str | None:
    """Whether a running variance's change is torch's with the batch variance times (n - 1) / n for one whole n:
    from rv1 = rv0 + m (var - rv0), each side's batch variance is rv0 + change / m; the framework's must be one
    multiple r = (n - 1) / n of torch's over the channels (least squares, to 1e-3 of their norm: a channel whose
    variance is near 0 carries the changes' rounding)."""
    m = TORCH_BN_MOMENTUM
    unbiased = w0.astype(np.float64) + ref.astype(np.float64) / m
    biased = w0.astype(np.float64) + got.astype(np.float64) / m
    scale = float(np.linalg.norm(unbiased))
    if scale == 0:
        return "torch's batch variance is 0"
    ratio = float(biased @ unbiased) / scale**2
    off = float(np.linalg.norm(biased - ratio * unbiased)) / scale
    if not 0.0 < ratio < 1.0 or off > 1e-3:
        return f"the framework's batch variance is no one multiple below 1 of torch's ({ratio:.4f}, off by {off:.1e})"
    n = 1.0 / (1.0 - ratio)
    if abs(n - round(n)) > 1e-2 * n or not 2 <= round(n) <= MAX_VALUES:
        return f"the ratio {ratio:.6f} is (n - 1) / n for no whole n ({n:.3f})"
    return None


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        name="biased-running-var",
        frameworks=frozenset({"jax", "tf", "paddle", "mxnet", "jittor"}),
        tensors=r"\.running_var$",
        why=(
            "BatchNorm updates its running variance with the biased batch variance (sum / n), as flax.linen, Gluon, "
            "Jittor, Keras and PaddlePaddle do; torch uses the unbiased one (sum / (n - 1)). Training "
            "normalises with the biased one everywhere, so only the running variance, and an evaluation "
            "forward after training, differ: by n / (n - 1), 14% at n = 8 values per channel"
        ),
        explains=biased_variance,
    ),
)


def deviation_for(framework: str, tensor: str) -> Deviation | None:
    """The deviation that covers a framework's tensor, or None."""
    return next((d for d in DEVIATIONS if d.covers(framework, tensor)), None)


__all__ = ["DEVIATIONS", "Deviation", "biased_variance", "deviation_for"]
