"""A convergence curve judged by AUC (#47, DLRM, as MLPerf judges DLRMv2): each reading scores the held-out set,
the run stops at the first AUC at or above its target, the verdict names AUC, and the curve survives its JSON."""

from __future__ import annotations

import pytest

from dlbench.analysis.convergence import from_dict, judge
from dlbench.analysis.targets import target_for, target_problem
from dlbench.cases import get_case
from dlbench.protocol.converge import Curve, train_curve


class _Rising:
    """A trainer whose loss falls and whose held-out AUC rises by a known amount per reading."""

    def __init__(self) -> None:
        self.steps = 0
        self.readings = 0

    def next_batch(self) -> None:
        return None

    def train_step(self, batch: None) -> None:
        self.steps += 1

    def sync(self) -> None:
        return None

    def loss_window(self) -> float:
        return 0.7 - 0.01 * self.steps / 10

    def agree_steps(self, steps: int) -> int:
        return steps

    def held_out_auc(self) -> float:
        self.readings += 1
        return 0.5 + 0.05 * self.readings


def test_the_run_stops_at_the_first_auc_at_its_target() -> None:
    trainer = _Rising()
    curve = train_curve(
        trainer, 1000, 10, 0.0, clock=iter(range(100)).__next__, evaluate=trainer.held_out_auc, target_auc=0.7
    )
    assert curve.auc == pytest.approx((0.55, 0.6, 0.65, 0.7)) and curve.steps == 40  # the loss target (0) never
    j = judge(curve, 0.0)
    assert (j.verdict, j.metric, j.target, j.steps_to_target) == ("converged", "auc", 0.7, 40)
    again = Curve.from_dict(curve.to_dict())
    assert again == curve
    assert from_dict(j.to_dict()) == j


def test_an_auc_never_reached_is_said_in_auc() -> None:
    trainer = _Rising()
    curve = train_curve(trainer, 30, 10, 0.0, evaluate=trainer.held_out_auc, target_auc=0.9)
    j = judge(curve, 0.0)
    assert j.verdict == "not reached" and "best AUC 0.65 < 0.9" in j.reason


def test_a_loss_curve_is_unchanged() -> None:
    trainer = _Rising()
    curve = train_curve(trainer, 1000, 10, 0.65, evaluate=trainer.held_out_auc)  # no AUC target: judged by loss
    assert curve.auc == () and curve.target_auc is None and curve.steps == 50
    assert "auc" not in curve.to_dict()


def test_dlrm_targets_an_auc_below_the_planted_truths() -> None:
    target = target_for(get_case("dlrm_tiny"))
    assert target is not None and target.auc is not None and target.best_auc is not None
    assert target.auc == pytest.approx(target.best_auc - 0.02, abs=1e-3)
    assert target_problem("dlrm_tiny", None, 0.99) is not None and "planted truth" in str(
        target_problem("dlrm_tiny", None, 0.99)
    )
    assert target_problem("dlrm_tiny", None, 0.8) is None
    assert target_for(get_case("dlrm_tiny"), loss=0.8).auc == 0.8  # type: ignore[union-attr]
