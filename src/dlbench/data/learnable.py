"""Learnable data that dlbench makes itself for `--converge` (issue #34): deterministic from a seed, no downloads.

- Images whose classes are separable by construction at any side: each class has a smooth template (a 4 x 4 grid
  of colours per class, scaled up to the side), every picture is its class's template plus Gaussian noise. The
  templates are far apart next to the noise, so the best possible loss is near 0 at any input size.
- Token streams from a small random Markov chain over `states` tokens: its entropy rate (`entropy_rate`, exact, in
  nats) is the best possible mean next-token loss of a model that sees the previous token.
- Masked-token streams from the same chain (BERT): masked positions never side by side, each replaced by a
  [MASK] id, every next-sentence label "is next"; the best possible masked-token loss is the chain's two-sided
  conditional entropy H(X_t | X_t-1, X_t+1).
- Click-through examples with a planted logistic truth: labels drawn from sigmoid(w . dense + b[id]), whose
  Bayes loss (`ctr_bayes_loss`) is the mean binary entropy of the planted probabilities.

Every source also has a held-out split (`HELD_OUT`, a stream no training run draws) and, per example, the loss of
the Bayes predictor that knows the source (`bayes_nll`): the independent evaluation of a convergence run
(dlbench/evaluate.py) compares a model's held-out loss with it, and no model can do better on average.
`DATA_VERSION` names these generators: shipped reference convergence points are keyed by it, so a change to any
stream's bytes must raise it.

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

from dlbench.cases import Case, CtrInput, ImageInput, LatentInput, TextInput
from dlbench.cases.arch import DlrmArch
from dlbench.cases.gpt import sequence_length
from dlbench.cases.lora import PRETRAIN_BATCH, SHIFTED_ROWS, lora_of
from dlbench.data.latents import LatentTemplates
from dlbench.data.recsys import PlantedClicks
from dlbench.data.synthetic import gather_masked, max_predictions

GRID = 4  # template cells per side, whatever the input side: separability does not depend on resolution
IMAGE_CLASSES = 10  # separable classes --converge uses of a classifier's outputs (labels 0..9)
MARKOV_STATES = 64  # tokens of the Markov source --converge feeds a language model (ids 0..63)
MIN_CELLS = 8  # cells (of channels x GRID x GRID) in which any two class templates differ
DATA_VERSION = 1  # of every generator here: raise it when a stream's bytes change (shipped RCPs are keyed by it)
HELD_OUT = 1_000_003  # the `order` of the held-out split; a run's seed (its training stream) stays below it
CALIBRATION = HELD_OUT + 1  # the stream an evaluation recomputes batch-norm statistics on (never scored, never trained)
CTR_VOCAB = 100  # ids the planted click-through source draws (a Wide & Deep table must hold at least these)


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

    def bayes_nll(self, images: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Per example, the cross-entropy of the Bayes predictor that knows the templates and the noise
        (posterior softmax(-|x - T_k|^2 / 2 sigma^2) over the classes); images NCHW."""
        x = images.reshape(len(images), -1).astype(np.float64)
        t = self.templates.reshape(self.classes, -1).astype(np.float64)
        logits = -((x[:, None, :] - t[None, :, :]) ** 2).sum(-1) / (2 * max(self.noise, 1e-12) ** 2)
        return _logsumexp(logits) - logits[np.arange(len(labels)), labels]

    def min_template_distance(self) -> float:
        """The smallest distance between two class templates (separability: compare with the noise's norm)."""
        flat = self.templates.reshape(self.classes, -1).astype(np.float64)
        d = np.sqrt(((flat[:, None, :] - flat[None, :, :]) ** 2).sum(-1))
        return float(d[~np.eye(self.classes, dtype=bool)].min())


def _logsumexp(logits: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis, stable."""
    top = logits.max(axis=-1)
    return np.asarray(top + np.log(np.exp(logits - top[..., None]).sum(axis=-1)))


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

    def bayes_nll(self, input_ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Per token, the next-token loss of the chain itself: -ln P[previous, next] (mean: the entropy rate)."""
        return np.asarray(-np.log(self.transition[input_ids, labels]))

    def two_sided_nll(self, left: np.ndarray, middle: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Per token, -ln P(middle | left, right) under the chain: the best possible masked-token loss."""
        p = self.transition
        joint = p[left, :] * p[:, right].T  # [n, states]: P(left -> k) P(k -> right)
        return np.asarray(-np.log(joint[np.arange(len(middle)), middle] / joint.sum(axis=1)))

    def two_sided_entropy(self) -> float:
        """H(X_t | X_t-1, X_t+1) of the stationary chain in nats: the mean of two_sided_nll."""
        p = self.transition
        pi = stationary(p)
        joint = pi[:, None, None] * p[:, :, None] * p[None, :, :]  # P(left, middle, right)
        given = joint / joint.sum(axis=1, keepdims=True)
        return float(-(joint * np.log(given)).sum())

    def unigram_entropy(self) -> float:
        """The entropy of the stationary distribution: the loss of a model that ignores every neighbour."""
        pi = stationary(self.transition)
        return float(-(pi * np.log(pi)).sum())


@dataclass(frozen=True)
class MaskedMarkov:
    """BERT's stream from a Markov source: rows of the chain, round(mask_prob x S) masked positions per row (never
    side by side, never the first or last token, so each sits between two visible neighbours) replaced by the id
    `states` ([MASK]), two segments, every next-sentence label 0 ("is next": a row is one stretch of the chain)."""

    tokens: MarkovTokens
    text: TextInput

    @property
    def mask_id(self) -> int:
        """The [MASK] id: the first id after the chain's tokens."""
        return self.tokens.states

    @property
    def best_loss(self) -> float:
        """The best possible loss: the masked tokens' two-sided conditional entropy (the NSP part can reach 0)."""
        return self.tokens.two_sided_entropy()

    def masked_count(self, seq: int) -> int:
        """Masked positions per row at sequence `seq`: round(mask_prob x S), at most max_predictions and the
        (S - 1) // 2 that fit between visible neighbours."""
        return max(1, min(max_predictions(self.text, seq), round(seq * self.text.mask_prob), (seq - 1) // 2))

    def batch(self, step: int, size: int, seq: int) -> dict[str, np.ndarray]:
        """Batch number `step` in the synthetic BERT layout (data/synthetic.synthetic_bert)."""
        if seq < 3:
            raise ValueError(f"a masked-token stream needs sequences of at least 3 tokens; got {seq}")
        chain = self.tokens.batch(step, size, seq)["input_ids"]
        rng = np.random.default_rng([self.tokens.seed, 34, 9, self.tokens.order, step])
        k, slots = self.masked_count(seq), seq - 2
        labels = np.full((size, seq), -100, np.int64)
        ids = chain.copy()
        for r in range(size):
            picked = np.sort(rng.choice(slots - k + 1, size=k, replace=False))
            where = 1 + picked + np.arange(k)  # k of positions 1..S-2, no two side by side
            labels[r, where] = chain[r, where]
            ids[r, where] = self.mask_id
        types = np.zeros((size, seq), np.int64)
        types[:, seq // 2 :] = 1
        return {
            "input_ids": ids,
            "token_type_ids": types,
            "attention_mask": np.ones((size, seq), np.int64),
            **gather_masked(labels, max_predictions(self.text, seq)),
            "nsp_labels": np.zeros(size, np.int64),
        }

    def bayes_nll(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Per masked token (weight 1) of a batch of this stream, the chain's two-sided loss."""
        ids, pos, target, w = batch["input_ids"], batch["mlm_positions"], batch["mlm_ids"], batch["mlm_weights"]
        rows = np.repeat(np.arange(len(ids)), pos.shape[1]).reshape(pos.shape)
        keep = w > 0
        left, right = ids[rows[keep], pos[keep] - 1], ids[rows[keep], pos[keep] + 1]
        return self.tokens.two_sided_nll(left, target[keep], right)


@dataclass(frozen=True)
class PlantedCtr:
    """Click-through examples whose labels follow a planted logistic model of the dense features and one id."""

    dense: int = 13
    categorical: int = 26
    wide: int = 2
    vocab: int = CTR_VOCAB
    seed: int = 0
    order: int = 0  # which stream of examples (a run's seed): the planted model stays that of `seed`
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
        rng = np.random.default_rng([self.seed, 34, 6, self.order, step])
        dense = rng.random((size, self.dense), dtype=np.float32)
        deep = rng.integers(0, self.vocab, (size, self.categorical), dtype=np.int64)
        wide = rng.integers(0, self.vocab, (size, self.wide), dtype=np.int64)
        p = self.probabilities(dense.astype(np.float64), deep[:, 0])
        labels = (rng.random(size) < p).astype(np.float32)[:, None]
        return {"dense": dense, "deep_ids": deep, "wide_ids": wide, "labels": labels}

    def bayes_nll(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Per example, the binary cross-entropy of the planted probability against the drawn label."""
        p = np.clip(self.probabilities(batch["dense"].astype(np.float64), batch["deep_ids"][:, 0]), 1e-12, 1 - 1e-12)
        y = batch["labels"].reshape(-1).astype(np.float64)
        return np.asarray(-(y * np.log(p) + (1 - y) * np.log(1 - p)))

    @property
    def best_loss(self) -> float:
        """The Bayes loss, estimated on 200,000 held-out examples (the planted probabilities' mean entropy)."""
        held = PlantedCtr(self.dense, self.categorical, self.wide, self.vocab, self.seed, HELD_OUT).batch(0, 200_000)
        return ctr_bayes_loss(self.probabilities(held["dense"].astype(np.float64), held["deep_ids"][:, 0]))


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


Source = SeparableImages | MarkovTokens | MaskedMarkov | PlantedCtr | LatentTemplates


def learnable_source(case: Case, order: int, input_size: int | None = None) -> Source:
    """The learnable source --converge feeds a case, its examples' stream picked by `order` (the run's seed;
    HELD_OUT: the held-out split): separable images (at the point's side) for a classifier, Markov tokens for a
    causal LM, masked Markov tokens for BERT, planted click-through examples for Wide & Deep. A ValueError for any
    other case."""
    if isinstance(case.input, ImageInput):
        return SeparableImages(IMAGE_CLASSES, input_size or case.input.size, case.input.channels, order=order)
    if isinstance(case.input, TextInput) and case.task == "causal_lm":
        shifted = SHIFTED_ROWS if lora_of(case) is not None else 0  # LoRA fine-tunes on a shifted chain (#47)
        return MarkovTokens(MARKOV_STATES, order=order, shifted=shifted)
    if isinstance(case.input, TextInput) and case.task == "bert_pretraining":
        return MaskedMarkov(MarkovTokens(MARKOV_STATES, order=order), case.input)
    if isinstance(case.input, CtrInput):
        return PlantedCtr(case.input.dense, case.input.categorical, case.input.wide, order=order)
    if isinstance(case.input, LatentInput):  # a diffusion transformer's latent templates (data/latents.py)
        return LatentTemplates(case.input, input_size or case.input.side, order=order)
    raise ValueError(f"no learnable data for {case.name} ({case.task})")


def source_batch(
    source: Source, case: Case, step: int, batch: int, input_size: int | None, channels_last: bool = False
) -> dict[str, np.ndarray]:
    """Batch number `step` of a learnable source at the point's batch and input size (a source of images is made
    at its side: learnable_source's input_size)."""
    if isinstance(source, SeparableImages):
        return source.batch(step, batch, channels_last)
    if isinstance(source, PlantedCtr | LatentTemplates):
        return source.batch(step, batch)
    seq = sequence_length(case, input_size) if case.task == "causal_lm" else input_size or _text(case).seq_len
    return source.batch(step, batch, seq)


def _text(case: Case) -> TextInput:
    if not isinstance(case.input, TextInput):
        raise TypeError(f"{case.name} has no text input")
    return case.input


def learnable_batches(
    case: Case, batch: int, input_size: int | None, order: int, channels_last: bool = False
) -> Iterator[dict[str, np.ndarray]]:
    """The learnable stream --converge feeds a case (numpy; a backend moves each batch to its device), batches 0,
    1, 2 ... of `learnable_source(case, order)` (planted clicks for a DLRM, data/recsys.py); `order` picks the
    stream (the run's seed)."""
    if isinstance(case.arch, DlrmArch):  # planted-logistic clicks (data/recsys.py)
        return PlantedClicks(case.arch, order=order).batches(batch)
    source = learnable_source(case, order, input_size)
    return (source_batch(source, case, step, batch, input_size, channels_last) for step in itertools.count())
