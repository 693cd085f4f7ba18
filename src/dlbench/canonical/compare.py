"""Comparing one framework's same-model results with torch's: relative differences, tolerances and a verdict.

- Forward (the logits, in training and in evaluation mode): max |a - b| / max |b| over each output.
- Loss: |a - b| / |b|.
- Step: for each tensor, ||da - db|| / ||db|| of the step's change (w1 - w0, L2 over the tensor).

The verdict reads the float64 run where both frameworks took one, else the float32 run, each with its own
tolerances. Float32 alone cannot judge a BatchNorm network: an activation or a batch variance within rounding of
its threshold goes either way, so the same framework with another convolution algorithm moves a ResNet-50 step by
up to 53% and an Inception v3 training forward by 1e-2 (docs/same-model.md); in float64 nothing is that close, and
the frameworks agree to about 1e-7, so the tolerances there can be tight enough to see a LayerNorm epsilon. The
float32 forward, the model the benchmark runs, is shown beside the verdict.

Tensors a named deviation covers (deviations.py) are left out of the verdict and reported beside it, where their
difference is the one the deviation predicts; otherwise they are judged as any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dlbench.canonical.deviations import Deviation, deviation_for

Precision = Literal["float64", "float32"]


@dataclass(frozen=True)
class Tolerances:
    """The largest relative differences that pass: forward (logits), loss, step."""

    forward: float
    loss: float
    step: float


TOLERANCES: dict[Precision, Tolerances] = {
    "float64": Tolerances(forward=1e-6, loss=1e-6, step=1e-5),
    "float32": Tolerances(forward=1e-4, loss=1e-4, step=1e-3),
}

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
    """One framework against torch, in the precision judged: forward (training and evaluation), loss and step, the
    deviations; and the float32 forward (the benchmark's model), shown, judged only where it is the precision."""

    framework: str
    precision: Precision
    logits: Figure
    eval_logits: Figure
    loss: Figure
    step: Figure
    float32_logits: Figure
    covered: tuple[Covered, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """Every judged figure within its tolerance."""
        return all(f.passed for f in (self.logits, self.eval_logits, self.loss, self.step))

    def figures(self) -> tuple[tuple[str, Figure], ...]:
        """The judged figures by label: logits, eval logits, loss and step."""
        return (("logits", self.logits), ("eval logits", self.eval_logits), ("loss", self.loss), ("step", self.step))

    def failure(self) -> str:
        """The first failed figure as one line naming the tensor ('' when it passed)."""
        for label, f in (("logits", self.logits), ("eval logits", self.eval_logits), ("loss", self.loss)):
            if not f.passed:
                return f"{self.precision} {label} differ by {f.value:.1e} > {f.tolerance:g} (worst: {f.worst})"
        if not self.step.passed:
            return (
                f"the {self.precision} step's change differs by {self.step.value:.1e} > {self.step.tolerance:g} "
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


def _outputs(ref: Arrays, got: Arrays, evaluation: bool) -> list[tuple[float, str]]:
    keys = sorted(k for k in ref if k.startswith("out/") and ("_eval" in k) == evaluation)
    return [(max_relative(got[k], ref[k]) if k in got else float("inf"), k[len("out/") :]) for k in keys]


def _step(
    framework: str, weights: Arrays, ref: Arrays, got: Arrays, tolerance: float
) -> tuple[Figure, tuple[Covered, ...]]:
    """The step's largest difference over the tensors no deviation explains, and the deviations' tensors."""
    judged: list[tuple[float, str]] = []
    covered: dict[str, list[tuple[float, str]]] = {}
    by_name: dict[str, Deviation] = {}
    for key in sorted(k for k in ref if k.startswith("delta/")):
        name = key[len("delta/") :]
        rel = l2_relative(got[key], ref[key]) if key in got else float("inf")
        deviation = deviation_for(framework, name)
        if deviation is not None and (
            rel <= tolerance
            or key not in got
            or name not in weights
            or deviation.explains(weights[name], ref[key], got[key]) is not None
        ):
            deviation = None  # no difference, or not the one the deviation predicts: judged as any other tensor
        if deviation is None:
            judged.append((rel, name))
        else:
            covered.setdefault(deviation.name, []).append((rel, name))
            by_name[deviation.name] = deviation
    return _worst(judged, tolerance), tuple(Covered(by_name[n], *max(v), len(v)) for n, v in covered.items())


def compare(
    framework: str,
    weights: Arrays,
    ref: Arrays,
    got: Arrays,
    ref64: Arrays | None = None,
    got64: Arrays | None = None,
) -> Comparison:
    """`got` (a framework's FW.npz) against `ref` (torch's), judged on their float64 runs where both exist; `weights`
    are the canonical weights the step started from (a deviation's test reads them)."""
    precision: Precision = "float64" if ref64 is not None and got64 is not None else "float32"
    r, g = (ref64, got64) if ref64 is not None and got64 is not None else (ref, got)
    tol = TOLERANCES[precision]
    step, covered = _step(framework, weights, r, g, tol.step)
    loss = [(max_relative(np.atleast_1d(g["loss"]), np.atleast_1d(r["loss"])), "loss")]
    return Comparison(
        framework=framework,
        precision=precision,
        logits=_worst(_outputs(r, g, evaluation=False), tol.forward),
        eval_logits=_worst(_outputs(r, g, evaluation=True), tol.forward),
        loss=_worst(loss, tol.loss),
        step=step,
        float32_logits=_worst(_outputs(ref, got, False) + _outputs(ref, got, True), TOLERANCES["float32"].forward),
        covered=covered,
    )


def unjudgeable(own: Comparison) -> frozenset[str]:
    """The figures a float32 run cannot judge for this case and batch: those where torch's own float32 run,
    compared with its float64 run (`own`), is itself outside float32's tolerances, as a BatchNorm network's
    training forward and step can be (Inception v3 at 107 px: logits 1.3e-4, step 8e-2)."""
    return frozenset(label for label, f in own.figures() if not f.passed)


__all__ = [
    "TOLERANCES",
    "Comparison",
    "Covered",
    "Figure",
    "Precision",
    "Tolerances",
    "compare",
    "l2_relative",
    "unjudgeable",
]
