"""The learnable data of --converge: deterministic per seed, separable images, exact Markov entropy rate, and BERT's
masked stream under its target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.data.learnable import (
    HELD_OUT,
    MARKOV_STATES,
    MarkovTokens,
    MaskedMarkov,
    PlantedCtr,
    SeparableImages,
    ctr_bayes_loss,
    entropy_rate,
    learnable_source,
    stationary,
)


def _h(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def test_images_are_the_same_for_a_seed_and_step_and_differ_across_seeds() -> None:
    a, b = SeparableImages(10, 32, seed=3), SeparableImages(10, 32, seed=3)
    first, again = a.batch(5, 8), b.batch(5, 8)
    assert np.array_equal(first["images"], again["images"]) and np.array_equal(first["labels"], again["labels"])
    assert not np.array_equal(first["images"], a.batch(6, 8)["images"])
    assert not np.array_equal(first["images"], SeparableImages(10, 32, seed=4).batch(5, 8)["images"])


@pytest.mark.parametrize("side", [4, 32, 224])
def test_nearest_template_classifies_noisy_images_at_any_side(side: int) -> None:
    data = SeparableImages(10, side, seed=0)
    out = data.batch(0, 200)
    flat = data.templates.reshape(10, -1)
    x = out["images"].reshape(200, -1)
    guess = np.argmin(((x[:, None, :] - flat[None]) ** 2).sum(-1), axis=1)
    assert (guess == out["labels"]).mean() == 1.0
    assert data.min_template_distance() > 0


def test_channels_last_is_a_transpose() -> None:
    data = SeparableImages(4, 8)
    assert np.array_equal(
        data.batch(1, 2, channels_last=True)["images"], data.batch(1, 2)["images"].transpose(0, 2, 3, 1)
    )


def test_too_small_a_side_is_refused() -> None:
    with pytest.raises(ValueError, match="side >= 4"):
        SeparableImages(10, 2)


def test_entropy_rate_of_a_two_state_chain_by_hand() -> None:
    a, b = 0.1, 0.3
    p = np.array([[1 - a, a], [b, 1 - b]])
    assert stationary(p) == pytest.approx([b / (a + b), a / (a + b)])
    assert entropy_rate(p) == pytest.approx(0.75 * _h(0.1) + 0.25 * _h(0.3))
    assert entropy_rate(np.full((2, 2), 0.5)) == pytest.approx(math.log(2))
    assert entropy_rate(np.eye(3)[[1, 2, 0]]) == pytest.approx(0.0)  # a deterministic cycle: nothing to learn


def test_markov_stream_matches_its_chain_and_is_deterministic() -> None:
    src = MarkovTokens(states=8, concentration=0.3, seed=1)
    out = src.batch(0, 64, 256)
    assert np.array_equal(
        out["input_ids"], MarkovTokens(states=8, concentration=0.3, seed=1).batch(0, 64, 256)["input_ids"]
    )
    assert np.array_equal(out["input_ids"][:, 1:], out["labels"][:, :-1])
    # The loss of the true chain on its own stream is the entropy rate, up to sampling error.
    nll = -np.log(src.transition[out["input_ids"], out["labels"]]).mean()
    assert nll == pytest.approx(src.best_loss, rel=0.05)
    assert 0 < src.best_loss < math.log(8)


def test_planted_ctr_labels_follow_their_probabilities() -> None:
    src = PlantedCtr(vocab=50, seed=2)
    out = src.batch(0, 20_000)
    p = src.probabilities(out["dense"].astype(np.float64), out["deep_ids"][:, 0])
    assert out["labels"].mean() == pytest.approx(p.mean(), abs=0.02)
    assert 0 < ctr_bayes_loss(p) < math.log(2)
    assert np.array_equal(out["labels"], PlantedCtr(vocab=50, seed=2).batch(0, 20_000)["labels"])


def _left_and_middle(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each masked token of a BERT batch of the masked stream, and the visible token left of it."""
    keep = batch["mlm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(batch["input_ids"]))[:, None], keep.shape)[keep]
    positions = batch["mlm_positions"][keep]
    return batch["input_ids"][rows, positions - 1], batch["mlm_ids"][keep]


def test_berts_target_is_sound_and_a_model_that_sees_a_neighbour_reaches_it() -> None:
    """BERT's target (the unigram entropy - 0.5) lies above the masked source's best loss (its two-sided entropy)
    and below what a model that ignores its neighbours reaches (the unigram entropy); a model that sees one
    neighbour gets there from as many masked tokens as 300 steps of batch 16 hold: the counts of (left, masked)
    pairs in the training stream, scored on the held-out stream, where the Bayes predictor does better still."""
    case = get_case("bert_base").configured({"seq": 32, "vocab": 128})
    target = target_for(case)
    train, held = learnable_source(case, 100), learnable_source(case, HELD_OUT)
    assert target is not None and isinstance(train, MaskedMarkov) and isinstance(held, MaskedMarkov)
    chain = train.tokens
    assert chain.two_sided_entropy() < chain.best_loss < target.loss < chain.unigram_entropy()
    assert target.best_loss == chain.two_sided_entropy()
    counts = np.full((MARKOV_STATES, MARKOV_STATES), 0.1)
    for step in range(300):
        left, middle = _left_and_middle(train.batch(step, 16, 32))
        np.add.at(counts, (left, middle), 1.0)
    model = np.log(counts / counts.sum(axis=1, keepdims=True))
    scores, bayes = [], []
    for step in range(20):
        batch = held.batch(step, 16, 32)
        left, middle = _left_and_middle(batch)
        scores.append(-model[left, middle])
        bayes.append(held.bayes_nll(batch))
    loss, floor = float(np.concatenate(scores).mean()), float(np.concatenate(bayes).mean())
    assert floor < loss < target.loss, (floor, loss, target.loss)
