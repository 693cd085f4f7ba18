"""DLRM's input (#47), framework-free (numpy): multi-hot ids from a stated distribution, the synthetic batches a
throughput point cycles through, the planted-logistic click source `--converge` trains on, and the AUC it is
judged by.

A DLRM batch is ``dense`` [B, 13] float32 in [0, 1), ``ids`` [B, sum(hotness)] int64 (feature f's `hotness[f]`
ids side by side, in feature order, each below its table's rows) and ``labels`` [B, 1] float32 0/1.

The planted truth (`PlantedClicks`): ``p = sigmoid((dense - 0.5) . w + mean of b[id mod PLANTED_ROWS] over
feature 0's ids)``, w and b normal(0, 2) from the seed, the label drawn from p. The best any model can do is to
know p: its AUC (`best_auc`, measured on the held-out set) and its loss (the mean binary entropy of p) bound what
a trained model reaches.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dlbench.cases.arch import DlrmArch
from dlbench.cases.dlrm import POWER_LAW_SHAPE

PLANTED_ROWS = 1000  # the planted bias repeats every this many rows: a source of the same size at any table size
EVAL_SAMPLES = 8192  # the held-out examples an AUC reading scores
CYCLED_BATCHES = 8  # distinct synthetic batches a throughput point cycles through (fresh ids step to step)


def draw_ids(a: DlrmArch, batch: int, rng: np.random.Generator) -> np.ndarray:
    """[batch, sum(hotness)] int64 ids, each feature's below its table's rows: power law (a Lomax draw of shape
    POWER_LAW_SHAPE, floored, modulo the rows) or uniform, as the architecture says."""
    columns = []
    for rows, hot in zip(a.rows, a.hotness, strict=True):
        if a.power_law:
            heavy = np.floor(rng.pareto(POWER_LAW_SHAPE, (batch, hot)))
            columns.append(np.fmod(heavy, rows).astype(np.int64))
        else:
            columns.append(rng.integers(0, rows, (batch, hot), dtype=np.int64))
    return np.concatenate(columns, axis=1)


def synthetic_dlrm(a: DlrmArch, batch: int, seed: int) -> dict[str, np.ndarray]:
    """One synthetic DLRM batch: uniform dense features, ids from the architecture's distribution, random labels."""
    rng = np.random.default_rng([seed, 47, 1])
    return {
        "dense": rng.random((batch, a.dense), dtype=np.float32),
        "ids": draw_ids(a, batch, rng),
        "labels": rng.integers(0, 2, (batch, 1)).astype(np.float32),
    }


def synthetic_cycle(a: DlrmArch, batch: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The CYCLED_BATCHES distinct batches a throughput point feeds in turn (made once, then moved to the device
    once), so that the looked-up rows change from step to step as a stream's would."""
    return [synthetic_dlrm(a, batch, seed * CYCLED_BATCHES + i) for i in range(CYCLED_BATCHES)]


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve: the chance that a random positive scores above a random negative (ties half),
    by the rank-sum (Mann-Whitney) formula; NaN when the labels hold one class."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel() > 0.5
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), np.float64)
    ranks[order] = np.arange(1, len(s) + 1)
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    ranks = (sums / counts)[inverse]  # tied scores share their mean rank
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def binary_entropy(p: np.ndarray) -> float:
    """The mean binary cross-entropy of a predictor that knows p (nats)."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    return float(np.mean(-(q * np.log(q) + (1 - q) * np.log(1 - q))))


@dataclass(frozen=True)
class PlantedClicks:
    """Click examples for a DLRM whose labels follow a planted logistic truth (this module's docstring): a stream
    of training batches per `order` (a run's seed) and one held-out set, the same for every framework."""

    arch: DlrmArch
    seed: int = 0
    order: int = 0
    weights: np.ndarray = field(init=False, repr=False, compare=False)
    bias: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 47, 2])
        object.__setattr__(self, "weights", rng.normal(0.0, 2.0, self.arch.dense))
        object.__setattr__(self, "bias", rng.normal(0.0, 2.0, PLANTED_ROWS))

    def probabilities(self, dense: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The planted click probability of each example."""
        first = ids[:, : self.arch.hotness[0]] % PLANTED_ROWS
        z = (dense.astype(np.float64) - 0.5) @ self.weights + self.bias[first].mean(axis=1)
        return 1.0 / (1.0 + np.exp(-z))

    def _draw(self, rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
        dense = rng.random((size, self.arch.dense), dtype=np.float32)
        ids = draw_ids(self.arch, size, rng)
        labels = (rng.random(size) < self.probabilities(dense, ids)).astype(np.float32)[:, None]
        return {"dense": dense, "ids": ids, "labels": labels}

    def batch(self, step: int, size: int) -> dict[str, np.ndarray]:
        """Training batch number `step` of this stream."""
        return self._draw(np.random.default_rng([self.seed, 47, 3, self.order, step]), size)

    def batches(self, size: int) -> Iterator[dict[str, np.ndarray]]:
        """Training batches 0, 1, 2 ... without end."""
        return (self.batch(step, size) for step in itertools.count())

    def held_out(self, size: int = EVAL_SAMPLES) -> dict[str, np.ndarray]:
        """The evaluation set an AUC reading scores (the same for every stream)."""
        return self._draw(np.random.default_rng([self.seed, 47, 4]), size)

    def best_auc(self) -> float:
        """The AUC of the planted probabilities on the held-out set: no model scores it higher, but by chance."""
        held = self.held_out()
        return roc_auc(self.probabilities(held["dense"], held["ids"]), held["labels"])

    def best_loss(self) -> float:
        """The Bayes loss on the held-out set: the mean binary entropy of the planted probabilities."""
        held = self.held_out()
        return binary_entropy(self.probabilities(held["dense"], held["ids"]))


__all__ = [
    "CYCLED_BATCHES",
    "EVAL_SAMPLES",
    "PLANTED_ROWS",
    "PlantedClicks",
    "binary_entropy",
    "draw_ids",
    "roc_auc",
    "synthetic_cycle",
    "synthetic_dlrm",
]
