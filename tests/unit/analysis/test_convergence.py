"""The verdict logic of --converge, tested with the fake backend's loss-curve knob (no framework)."""

from __future__ import annotations

import math
from itertools import count

import pytest

from dlbench.analysis.convergence import Floor, Reference, judge, score_times
from dlbench.backends.fake import FakeTrainer
from dlbench.protocol.converge import Curve, train_curve


def _ticks() -> object:
    c = count()
    return lambda: float(next(c))  # one second per clock read: wall times are exact


def _run(factor: float, budget: int = 400, target: float = 0.1, nan_at: int | None = None) -> Curve:
    trainer = FakeTrainer(0.0, factor=factor, nan_at=nan_at)
    return train_curve(trainer, budget=budget, every=10, target_loss=target, clock=_ticks())  # type: ignore[arg-type]


def test_a_decaying_curve_converges_within_its_own_band() -> None:
    # 0.99^k <= 0.1 first at k = 230; window means lag a little, so the reading after step 240 is the first.
    curve = _run(0.99)
    j = judge(curve, 0.1, Reference(steps=(240, 240, 250), every=10))
    assert j.verdict == "converged" and not j.faster
    assert j.steps_to_target == 240 and j.wall_to_target_s == 24.0  # 24 windows, one tick each
    assert j.final_loss <= 0.1 < j.start_loss


def test_a_slow_curve_is_slower_and_a_fast_one_is_marked_faster() -> None:
    ref = Reference(steps=(240, 240, 250), every=10)
    slow = judge(_run(0.995, budget=1000), 0.1, ref)
    assert slow.verdict == "slower" and slow.steps_to_target is not None and slow.steps_to_target > ref.band[1]
    fast = judge(_run(0.95), 0.1, ref)
    assert fast.verdict == "converged" and fast.faster and fast.mark == "converged*"


def test_nan_diverges_and_the_curve_stops_there() -> None:
    curve = _run(0.99, nan_at=55)
    assert curve.steps == 60 and math.isnan(curve.losses[-1])
    j = judge(curve, 0.1)
    assert j.verdict == "diverged" and "step 60" in j.reason


def test_a_rising_loss_diverges() -> None:
    assert judge(_run(1.01, budget=100), 0.1).verdict == "diverged"


def test_a_flat_loss_is_not_reached_and_an_interrupted_one_says_so() -> None:
    curve = _run(0.9999, budget=50)
    assert judge(curve, 0.1).verdict == "not reached"
    stopped = Curve(10, curve.losses, curve.wall_s, curve.steps, interrupted=True)
    assert judge(stopped, 0.1).verdict == "interrupted"


def test_ctrl_c_keeps_the_curve_so_far() -> None:
    class Stops(FakeTrainer):
        def train_step(self, batch: object) -> None:
            if self.steps == 35:
                raise KeyboardInterrupt
            super().train_step(batch)

    curve = train_curve(Stops(0.0), budget=100, every=10, target_loss=0.01)
    assert curve.interrupted and curve.steps == 30 and len(curve.losses) == 3


def test_every_rank_stops_where_rank_0_decides() -> None:
    # A data-parallel rank reads its own examples' loss: one that reaches the target before rank 0 must train on
    # (else its collectives go unpaired: ddp-bf16 at 2 ranks failed so), and one that has not must stop with it.
    class Rank(FakeTrainer):
        def __init__(self, rank0_stops_at: int) -> None:
            super().__init__(0.0, factor=0.99)
            self.rank0_stops_at = rank0_stops_at

        def agree_steps(self, steps: int) -> int:
            return int(self.steps >= self.rank0_stops_at)  # rank 0's decision, as the broadcast would give it

    early = train_curve(Rank(300), budget=400, every=10, target_loss=0.1)  # this rank alone reaches 0.1 at 240
    assert early.steps == 300 and early.losses[-1] < 0.1
    late = train_curve(Rank(100), budget=400, every=10, target_loss=0.1)
    assert late.steps == 100 and late.losses[-1] > 0.1


def test_without_a_reference_the_verdict_says_it_had_none() -> None:
    j = judge(_run(0.99), 0.1)
    assert j.verdict == "converged" and "no reference" in j.reason and j.reference is None


def test_the_band_is_where_one_run_reads_neither_faster_nor_slower() -> None:
    # Student's t at p = 0.05 one-sided with n - 1 = 1 degree of freedom is 6.3138 (tables); one candidate run
    # against two reference runs: half width t x sd x sqrt(1 + 1/2).
    ref = Reference(steps=(100, 120), every=10)
    half = 6.3138 * math.sqrt(200) * math.sqrt(1.5)
    assert ref.band == pytest.approx((110 - half, 110 + half), abs=0.01)
    assert judge(_run(0.99), 0.1, Reference(steps=(500, 520, 510, 505, 515), every=10)).mark == "converged*"


def test_a_loss_below_the_floor_is_impossible_never_converged() -> None:
    curve = _run(0.95)  # reaches 0.1 quickly: a trainer that says so of data whose best loss is 0.5 lies
    j = judge(curve, 0.6, Reference(steps=(240, 240, 250), every=10), floor=Floor(best=0.5))
    assert j.verdict == "impossible" and "below the best loss" in j.reason
    held = {"target": {"loss": 0.40, "bayes": 0.5, "diff_mean": -0.1, "diff_se": 0.01}}
    assert judge(_run(0.99), 0.6, evaluation=held, floor=Floor(best=0.0)).verdict == "impossible"


def test_the_evaluated_weights_decide_whether_the_target_was_reached() -> None:
    ref = Reference(steps=(240, 240, 250), every=10)
    honest = {"target": {"loss": 0.11, "bayes": 0.0, "diff_mean": 0.11, "diff_se": 0.01}}
    assert judge(_run(0.99), 0.1, ref, honest, Floor(best=0.0)).verdict == "converged"
    flattered = {"target": {"loss": 0.3, "bayes": 0.0, "diff_mean": 0.3, "diff_se": 0.01}}
    j = judge(_run(0.99), 0.1, ref, flattered, Floor(best=0.0))
    assert j.verdict == "not reached" and "held-out loss 0.3" in j.reason
    auc = {"target": {"loss": 0.1, "bayes": 0.0, "diff_mean": 0.1, "diff_se": 0.01, "auc": 0.6}}
    assert judge(_run(0.99), 0.1, ref, auc, Floor(best=0.0, auc=0.8)).verdict == "not reached"
    # Target 0.1, best 0: the weights may lie up to 0.15 above, and 2 standard errors of the held-out mean beyond.
    noisy = {"target": {"loss": 0.2, "bayes": 0.0, "diff_mean": 0.2, "diff_se": 0.03}}
    assert judge(_run(0.99), 0.1, ref, noisy, Floor(best=0.0)).verdict == "converged"
    clear = {"target": {"loss": 0.22, "bayes": 0.0, "diff_mean": 0.22, "diff_se": 0.03}}
    j = judge(_run(0.99), 0.1, ref, clear, Floor(best=0.0))
    assert j.verdict == "not reached" and "2 standard errors" in j.reason
    broken_after = {**honest, "end": {"loss": float("nan"), "bayes": 0.0}}
    assert judge(_run(0.99), 0.1, ref, broken_after, Floor(best=0.0)).verdict == "diverged"


def test_time_to_target_is_scored_the_mlperf_way_from_five_runs() -> None:
    five = score_times([10.0, 1.0, 4.0, 5.0, 6.0])
    assert five is not None and five.value == 5.0 and "MLPerf" in five.method and "dropped" in five.method
    three = score_times([1.0, 2.0, 6.0])
    assert three is not None and three.value == 3.0 and "none dropped" in three.method
    one = score_times([7.0])
    assert one is not None and one.value == 7.0 and "one run" in one.method
    assert score_times([]) is None


def test_a_judgement_round_trips_through_its_dict() -> None:
    from dlbench.analysis.convergence import from_dict

    j = judge(_run(0.99, nan_at=20), 0.1)
    raw = j.to_dict()
    assert raw["final_loss"] == "nan"
    assert from_dict(raw).verdict == "diverged"
    assert Curve.from_dict(_run(0.99).to_dict()) == _run(0.99)


def test_the_fake_backend_curve_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.backends.fake import FakeBackend
    from dlbench.cases import get_case
    from dlbench.spec import PointSpec, preset
    from dlbench.wire import RankContext

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.9:nan_at:3")
    spec = PointSpec(framework="fake", model="resnet50", batch_size=1, protocol=preset("quick"))
    trainer = FakeBackend().build(spec, get_case("resnet50"), RankContext())
    trainer.train_step(None)
    trainer.train_step(None)
    assert trainer.loss_window() == pytest.approx((0.9 + 0.81) / 2)
    trainer.train_step(None)
    assert math.isnan(trainer.loss_window())


def test_compare_says_when_two_runs_differ_in_verdict() -> None:
    import dataclasses

    from dlbench.analysis.compare import compare_runs
    from dlbench.analysis.convergence import VERDICT_KEY
    from dlbench.records import PointResult
    from dlbench.spec import PointSpec, preset
    from dlbench.store.rows import StoredPoint

    spec = PointSpec(framework="torch", model="resnet50", batch_size=8, protocol=preset("quick"), converge=True)
    good = PointResult(spec=spec, status="ok", extra={VERDICT_KEY: {"verdict": "converged"}})
    bad = dataclasses.replace(good, extra={VERDICT_KEY: {"verdict": "diverged"}})
    out = compare_runs("a", [StoredPoint(1, "a", good)], "b", [StoredPoint(2, "b", bad)])
    assert any("verdicts differ for 1 point(s)" in w and "converged -> diverged" in w for w in out.warnings)
    same = compare_runs("a", [StoredPoint(1, "a", good)], "b", [StoredPoint(2, "b", good)])
    assert not any("verdicts" in w for w in same.warnings)


def test_the_reference_line_scores_its_times_and_says_how() -> None:
    three = Reference(steps=(100, 110, 120), every=10, wall_s=(1.0, 2.0, 6.0)).describe()
    assert "3.0 s to target (mean of 3 runs (fewer than 5: none dropped))" in three
    five = Reference(steps=(100,) * 5, every=10, wall_s=(10.0, 1.0, 4.0, 5.0, 6.0)).describe()
    assert "5.0 s to target (MLPerf" in five


def test_weights_that_do_not_confirm_the_target_read_not_reached_before_the_end_is_judged() -> None:
    # A step that reports 0.6 x its loss: its curve starts flattered too, so the end's honest held-out loss lies
    # above that start; the verdict is the target's, not a divergence measured against the trainer's own word.
    flattered = {
        "target": {"loss": 2.0, "bayes": 0.0, "diff_mean": 2.0, "diff_se": 0.01},
        "end": {"loss": 2.0, "bayes": 0.0, "diff_mean": 2.0, "diff_se": 0.01},
    }
    j = judge(_run(0.99), 0.1, evaluation=flattered, floor=Floor(best=0.0))
    assert j.verdict == "not reached" and "held-out loss 2" in j.reason
    honest_then_nan = {  # strict JSON keeps a NaN held-out loss as null
        "target": {"loss": 0.11, "bayes": 0.0, "diff_mean": 0.11, "diff_se": 0.01},
        "end": {"loss": None, "bayes": 0.0, "diff_mean": None, "diff_se": None},
    }
    j = judge(_run(0.99), 0.1, evaluation=honest_then_nan, floor=Floor(best=0.0))
    assert j.verdict == "diverged" and "held-out loss nan" in j.reason


def test_a_case_without_an_evaluation_says_so() -> None:
    from dlbench.cases import get_case
    from dlbench.evaluate import unevaluated

    assert unevaluated(get_case("gpt")) is None and unevaluated(get_case("resnet50")) is None
    assert unevaluated(get_case("wide_deep")) is None and unevaluated(get_case("bert_base")) is None
    why = unevaluated(get_case("dit_tiny"))
    assert why is not None and "judged on its curve alone" in why
    dlrm = unevaluated(get_case("dlrm_tiny"))  # DLRM's planted clicks are not Wide & Deep's
    assert dlrm is not None and "held-out AUC" in dlrm
