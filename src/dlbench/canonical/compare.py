"""Comparing one framework's same-model results with torch's: relative differences, tolerances and a verdict.

- Forward (the logits, in training and in evaluation mode): max |a - b| / max |b| over each output, float32.
- Loss: |a - b| / |b|, float32.
- Step: for each tensor, ||da - db|| / ||db|| of the step's change (w1 - w0, L2 over the tensor), from the float64
  step where both frameworks took one, else from the float32 step. A float32 step of a ReLU network is chaotic at
  the element level: an activation within rounding of zero goes either way and moves its gradient's channel by
  up to tens of percent (measured: torch against torch with another convolution algorithm, ResNet-50). In float64
  no activation is that close, so the comparison sees the model and not the rounding.

Tensors a named deviation covers (deviations.py) are left out of the verdict and reported beside it, where their
difference is the one the deviation predicts; otherwise they are judged as any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dlbench.canonical.deviations import Deviation, deviation_for

FORWARD_TOL = 1e-4
LOSS_TOL = 1e-4
STEP_TOL = 1e-3

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Figure:
    """The largest relative difference over a group of tensors, and which tensor it was (None: nothing compared)."""

    value: float | None
    worst: str = ""
    tolerance: float = 0.0

    @property
    def passed(self) -> bool:
        """Within the tolerance (or nothing to compare)."""
        return self.value is None or self.value <= self.tolerance


@dataclass(frozen=True)
class Covered:
    """The tensors a deviation took out of the verdict, and their largest difference."""

    deviation: Deviation
    value: float
    worst: str
    count: int


@dataclass(frozen=True)
class Comparison:
    """One framework against torch: forward (training and evaluation), loss and step, and the deviations."""

    framework: str
    logits: Figure
    eval_logits: Figure
    loss: Figure
    step: Figure
    step_dtype: str  # "float64" or "float32"
    covered: tuple[Covered, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """Every figure within its tolerance."""
        return all(f.passed for f in (self.logits, self.eval_logits, self.loss, self.step))

    def failure(self) -> str:
        """The first failed figure as one line naming the tensor ('' when it passed)."""
        for label, f in (("logits", self.logits), ("eval logits", self.eval_logits), ("loss", self.loss)):
            if not f.passed:
                return f"{label} differ by {f.value:.1e} > {f.tolerance:g} (worst: {f.worst})"
        if not self.step.passed:
            return (
                f"the {self.step_dtype} step's change differs by {self.step.value:.1e} > {self.step.tolerance:g} "
                f"(worst tensor: {self.step.worst})"
            )
        return ""


def max_relative(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (b the reference), in float64; inf where shapes differ or a is not finite."""
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("inf")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    scale = float(np.abs(b64).max()) if b64.size else 0.0
    diff = float(np.abs(a64 - b64).max()) if a64.size else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def l2_relative(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| (b the reference), in float64; inf where shapes differ or a is not finite."""
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("inf")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    scale = float(np.linalg.norm(b64))
    diff = float(np.linalg.norm(a64 - b64))
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _worst(pairs: list[tuple[float, str]], tolerance: float) -> Figure:
    if not pairs:
        return Figure(None, "", tolerance)
    value, name = max(pairs)
    return Figure(value, name, tolerance)


def compare(
    framework: str,
    weights: Arrays,
    ref: Arrays,
    got: Arrays,
    ref64: Arrays | None = None,
    got64: Arrays | None = None,
) -> Comparison:
    """`got` (a framework's FW.npz) against `ref` (torch's), and their float64 steps where both exist; `weights`
    are the canonical weights the step started from (a deviation's test reads them)."""
    outputs = sorted(k for k in ref if k.startswith("out/"))
    train = [(max_relative(got[k], ref[k]) if k in got else float("inf"), k[4:]) for k in outputs if "_eval" not in k]
    evals = [(max_relative(got[k], ref[k]) if k in got else float("inf"), k[4:]) for k in outputs if "_eval" in k]
    loss = [(max_relative(np.atleast_1d(got["loss"]), np.atleast_1d(ref["loss"])), "loss")]
    use64 = ref64 is not None and got64 is not None
    step_ref, step_got = (ref64, got64) if use64 else (ref, got)
    assert step_ref is not None and step_got is not None
    judged: list[tuple[float, str]] = []
    covered: dict[str, list[tuple[float, str]]] = {}
    by_name: dict[str, Deviation] = {}
    for key in sorted(k for k in step_ref if k.startswith("delta/")):
        name = key[len("delta/") :]
        rel = l2_relative(step_got[key], step_ref[key]) if key in step_got else float("inf")
        deviation = deviation_for(framework, name)
        if deviation is not None and (
            rel <= STEP_TOL
            or key not in step_got
            or name not in weights
            or deviation.explains(weights[name], step_ref[key], step_got[key]) is not None
        ):
            deviation = None  # no difference, or not the one the deviation predicts: judged as any other tensor
        if deviation is None:
            judged.append((rel, name))
        else:
            covered.setdefault(deviation.name, []).append((rel, name))
            by_name[deviation.name] = deviation
    return Comparison(
        framework=framework,
        logits=_worst(train, FORWARD_TOL),
        eval_logits=_worst(evals, FORWARD_TOL),
        loss=_worst(loss, LOSS_TOL),
        step=_worst(judged, STEP_TOL),
        step_dtype="float64" if use64 else "float32",
        covered=tuple(Covered(by_name[n], *max(v), len(v)) for n, v in covered.items()),
    )


__all__ = ["FORWARD_TOL", "LOSS_TOL", "STEP_TOL", "Comparison", "Covered", "Figure", "compare", "l2_relative"]
