"""Learnable data that dlbench makes itself for `--converge` (issue #34): deterministic from a seed, no downloads.

- Images whose classes are separable by construction at any side: each class has a smooth template (a 4 x 4 grid
  of colours per class, scaled up to the side), every picture is its class's template plus Gaussian noise. The
  templates are far apart next to the noise, so the best possible loss is near 0 at any input size.
- Token streams from a small random Markov chain over `states` tokens: its entropy rate (`entropy_rate`, exact, in
  nats) is the best possible mean next-token loss of a model that sees the previous token.
- Click-through examples with a planted logistic truth: labels drawn from sigmoid(w . dense + b[id]), whose
  Bayes loss (`ctr_bayes_loss`) is the mean binary entropy of the planted probabilities.

A source is made once (its templates or chain from the seed) and then yields as many batches as asked, each the
same for a given (seed, step): frameworks fed by the same source see the same examples in the same order.
Framework-free: numpy only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dlbench.cases import Case, ImageInput, LatentInput, TextInput
from dlbench.cases.arch import DlrmArch
from dlbench.cases.gpt import sequence_length
from dlbench.cases.lora import PRETRAIN_BATCH, SHIFTED_ROWS, lora_of
from dlbench.data.latents import LatentTemplates
from dlbench.data.recsys import PlantedClicks

GRID = 4  # template cells per side, whatever the input side: separability does not depend on resolution
IMAGE_CLASSES = 10  # separable classes --converge uses of a classifier's outputs (labels 0..9)
MARKOV_STATES = 64  # tokens of the Markov source --converge feeds a language model (ids 0..63)
MIN_CELLS = 8  # cells (of channels x GRID x GRID) in which any two class templates differ


def _upsample(grid: np.ndarray, side: int) -> np.ndarray:
    """A [C, g, g] grid to [C, side, side] by nearest-neighbour blocks (any side >= 1)."""
    index = (np.arange(side) * grid.shape[-1]) // side
    return grid[:, index][:, :, index]


@dataclass(frozen=True)
class SeparableImages:
    """Class templates plus noise; `classes` of them used (labels 0..classes-1), at `side` x `side` pixels."""

    classes: int
    side: int
    channels: int = 3
    noise: float = 0.5
    seed: int = 0
    order: int = 0  # which stream of examples (a run's seed): the templates stay those of `seed`
    templates: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.classes < 2 or self.side < GRID or self.channels < 1 or self.noise < 0:
            raise ValueError(
                f"separable images need >= 2 classes, side >= {GRID}, channels >= 1 and noise >= 0; got "
                f"{self.classes}, {self.side}, {self.channels}, {self.noise}"
            )
        rng = np.random.default_rng([self.seed, 34, 1])
        while True:  # redraw until every two classes differ in at least MIN_CELLS cells (deterministic per seed)
            grids = rng.choice([-1.0, 1.0], size=(self.classes, self.channels, GRID, GRID))
            flat = grids.reshape(self.classes, -1)
            differ = (flat[:, None, :] != flat[None, :, :]).sum(-1) + MIN_CELLS * np.eye(self.classes, dtype=int)
            if differ.min() >= MIN_CELLS:
                break
        full = np.stack([_upsample(g, self.side) for g in grids]).astype(np.float32)
        object.__setattr__(self, "templates", full)

    def batch(self, step: int, size: int, channels_last: bool = False) -> dict[str, np.ndarray]:
        """Batch number `step` (the same for every caller): float32 images, int64 labels."""
        rng = np.random.default_rng([self.seed, 34, 2, self.order, step])
        labels = rng.integers(0, self.classes, size)
        noise = rng.standard_normal((size, self.channels, self.side, self.side), dtype=np.float32)
        images = self.templates[labels] + np.float32(self.noise) * noise
        if channels_last:
            images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        return {"images": images, "labels": labels.astype(np.int64)}

    def batches(self, size: int, channels_last: bool = False) -> Iterator[dict[str, np.ndarray]]:
        """Batches 0, 1, 2 ... without end."""
        step = 0
        while True:
            yield self.batch(step, size, channels_last)
            step += 1

    def min_template_distance(self) -> float:
        """The smallest distance between two class templates (separability: compare with the noise's norm)."""
        flat = self.templates.reshape(self.classes, -1).astype(np.float64)
        d = np.sqrt(((flat[:, None, :] - flat[None, :, :]) ** 2).sum(-1))
        return float(d[~np.eye(self.classes, dtype=bool)].min())


def stationary(transition: np.ndarray) -> np.ndarray:
    """The stationary distribution pi of a row-stochastic matrix (pi P = pi, sum 1), by its left eigenvector."""
    values, vectors = np.linalg.eig(transition.T)
    v = np.real(vectors[:, int(np.argmin(np.abs(values - 1.0)))])
    return v / v.sum()


def entropy_rate(transition: np.ndarray) -> float:
    """The entropy rate of a stationary Markov chain in nats: H = -sum_i pi_i sum_j P_ij ln P_ij."""
    p = np.asarray(transition, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(p > 0, np.log(p), 0.0)
    return float(-(stationary(p) * (p * logs).sum(axis=1)).sum())


@dataclass(frozen=True)
class MarkovTokens:
    """A random Markov chain over tokens 0..states-1 (each row Dirichlet(concentration)), and streams from it."""

    states: int = 64
    concentration: float = 0.1
    seed: int = 0
    order: int = 0  # which stream of examples (a run's seed): the chain stays that of `seed`
    shifted: int = 0  # a fine-tuning source (#47): this many of the chain's rows drawn afresh, the rest kept
    transition: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.states < 2 or self.concentration <= 0 or not 0 <= self.shifted <= self.states:
            raise ValueError(f"a Markov source needs >= 2 states and concentration > 0; got {self.states}")
        rng = np.random.default_rng([self.seed, 34, 3])
        p = rng.dirichlet(np.full(self.states, self.concentration), size=self.states)
        if self.shifted:  # the first `shifted` tokens are followed by other tokens than in the pretraining chain
            fresh = np.random.default_rng([self.seed, 47, 5])
            p[: self.shifted] = fresh.dirichlet(np.full(self.states, self.concentration), size=self.shifted)
        p = np.maximum(p, 1e-6)  # every transition possible: the chain is irreducible and aperiodic
        object.__setattr__(self, "transition", p / p.sum(axis=1, keepdims=True))

    @property
    def best_loss(self) -> float:
        """The best possible mean next-token cross-entropy (nats): the chain's entropy rate."""
        return entropy_rate(self.transition)

    def batch(self, step: int, size: int, seq: int) -> dict[str, np.ndarray]:
        """Batch number `step`: `input_ids` [size, seq] and next-token `labels` [size, seq], int64, each row
        started from the stationary distribution."""
        rng = np.random.default_rng([self.seed, 34, 4, self.order, step])
        cumulative = np.cumsum(self.transition, axis=1)
        tokens = np.empty((size, seq + 1), np.int64)
        tokens[:, 0] = rng.choice(self.states, size=size, p=stationary(self.transition))
        draws = rng.random((size, seq))
        for t in range(seq):
            rows = cumulative[tokens[:, t]]
            tokens[:, t + 1] = np.minimum((rows < draws[:, t : t + 1]).sum(axis=1), self.states - 1)
        return {"input_ids": np.ascontiguousarray(tokens[:, :-1]), "labels": np.ascontiguousarray(tokens[:, 1:])}


@dataclass(frozen=True)
class PlantedCtr:
    """Click-through examples whose labels follow a planted logistic model of the dense features and one id."""

    dense: int = 13
    categorical: int = 26
    wide: int = 2
    vocab: int = 1000
    seed: int = 0
    weights: np.ndarray = field(init=False, repr=False, compare=False)
    id_bias: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 34, 5])
        object.__setattr__(self, "weights", rng.normal(0.0, 2.0, self.dense))
        object.__setattr__(self, "id_bias", rng.normal(0.0, 2.0, self.vocab))

    def probabilities(self, dense: np.ndarray, first_id: np.ndarray) -> np.ndarray:
        """The planted click probability of each example."""
        z = (dense - 0.5) @ self.weights + self.id_bias[first_id]
        return 1.0 / (1.0 + np.exp(-z))

    def batch(self, step: int, size: int) -> dict[str, np.ndarray]:
        """Batch number `step`, Criteo-shaped as data.synthetic.synthetic_ctr, labels from the planted model."""
        rng = np.random.default_rng([self.seed, 34, 6, step])
        dense = rng.random((size, self.dense), dtype=np.float32)
        deep = rng.integers(0, self.vocab, (size, self.categorical), dtype=np.int64)
        wide = rng.integers(0, self.vocab, (size, self.wide), dtype=np.int64)
        p = self.probabilities(dense.astype(np.float64), deep[:, 0])
        labels = (rng.random(size) < p).astype(np.float32)[:, None]
        return {"dense": dense, "deep_ids": deep, "wide_ids": wide, "labels": labels}


def ctr_bayes_loss(p: np.ndarray) -> float:
    """The mean binary cross-entropy of a predictor that knows the planted probabilities p (nats)."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    return float(np.mean(-(q * np.log(q) + (1 - q) * np.log(1 - q))))


def uniform_loss(classes: int) -> float:
    """The cross-entropy of a uniform guess over `classes` classes: ln(classes), where training starts."""
    return math.log(classes)


def pretraining_batches(case: Case, input_size: int | None) -> Iterator[dict[str, np.ndarray]]:
    """The stream a LoRA case's base is pretrained on before --converge fine-tunes it: the unshifted Markov chain,
    PRETRAIN_BATCH sequences a step, its own order (the same base for every seed of the fine-tuning)."""
    tokens, seq = MarkovTokens(MARKOV_STATES, order=1_000_000), sequence_length(case, input_size)
    return (tokens.batch(step, PRETRAIN_BATCH, seq) for step in itertools.count())


def learnable_batches(
    case: Case, batch: int, input_size: int | None, order: int, channels_last: bool = False
) -> Iterator[dict[str, np.ndarray]]:
    """The learnable stream --converge feeds a case (numpy; a backend moves each batch to its device): separable
    images for a classifier, Markov tokens for a causal LM, planted clicks for a DLRM; `order` picks the stream
    (the run's seed)."""
    if isinstance(case.input, ImageInput):
        images = SeparableImages(IMAGE_CLASSES, input_size or case.input.size, case.input.channels, order=order)
        return images.batches(batch, channels_last)
    if isinstance(case.arch, DlrmArch):  # planted-logistic clicks (data/recsys.py)
        return PlantedClicks(case.arch, order=order).batches(batch)
    if isinstance(case.input, LatentInput):  # a diffusion transformer's latent templates (data/latents.py)
        latents = LatentTemplates(case.input, input_size or case.input.side, order=order)
        return (latents.batch(step, batch) for step in itertools.count())
    if isinstance(case.input, TextInput) and case.task == "causal_lm":
        shifted = SHIFTED_ROWS if lora_of(case) is not None else 0  # LoRA fine-tunes on a shifted chain (#47)
        tokens, seq = MarkovTokens(MARKOV_STATES, order=order, shifted=shifted), sequence_length(case, input_size)
        return (tokens.batch(step, batch, seq) for step in itertools.count())
    raise ValueError(f"no learnable data for {case.name} ({case.task})")
