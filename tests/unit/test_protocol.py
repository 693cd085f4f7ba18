"""The protocol's arithmetic, checked exactly with a fake clock whose steps take known times."""

from __future__ import annotations

import pytest

from dlbench.protocol.runner import measure
from dlbench.protocol.stats import confidence_interval, repeat_throughputs, summarize
from dlbench.results.schema import RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol


class ClockedTrainer:
    """Each step advances a fake clock: warm-up steps cost `warm`, measured ones follow `durations`."""

    def __init__(self, durations: list[float], warm: float, warmup: int, steps: int) -> None:
        self.now = 0.0
        self.durations = iter(durations)
        self.warm, self.warmup, self.steps = warm, warmup, steps
        self.count = 0
        self.syncs = 0

    def step(self) -> None:
        in_repeat = self.count % (self.warmup + self.steps)
        self.now += self.warm if in_repeat < self.warmup else next(self.durations)
        self.count += 1

    def sync(self) -> None:
        self.syncs += 1

    def clock(self) -> float:
        return self.now


def spec(protocol: Protocol, batch: int = 32) -> PointSpec:
    return PointSpec(framework="fake", model="resnet50", batch_size=batch, protocol=protocol)


def test_warmup_is_never_timed_and_every_step_is_kept() -> None:
    proto = Protocol(warmup=3, steps=4, repeats=2, statistic="mean")
    durations = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    t = ClockedTrainer(durations, warm=100.0, warmup=3, steps=4)
    reps = measure(t, proto, clock=t.clock)
    assert [r.step_times for r in reps] == [(0.5,) * 4, (0.25,) * 4]
    assert [r.wall_s for r in reps] == [2.0, 1.0]
    assert t.count == 2 * (3 + 4)
    # a sync after every step, and one before the first clock read of each repeat
    assert t.syncs == 2 * (3 + 4) + 2


def test_throughput_is_samples_over_wall_time_with_mean_statistic() -> None:
    proto = Protocol(warmup=1, steps=4, repeats=2, statistic="mean")
    t = ClockedTrainer([0.5] * 4 + [0.25] * 4, warm=9.0, warmup=1, steps=4)
    reps = measure(t, proto, clock=t.clock)
    m = summarize(spec(proto), (RankRaw(rank=0, repeats=reps, final_loss=1.0),))
    # repeat 1: 32*4/2.0 = 64 samples/s; repeat 2: 32*4/1.0 = 128 samples/s
    assert m.repeat_throughputs == (64.0, 128.0)
    assert m.throughput == 96.0
    assert m.median_step_s == pytest.approx(0.375)
    assert m.statistic == "mean"


def test_median_statistic_and_not_mean_of_step_rates() -> None:
    proto = Protocol(warmup=0, steps=2, repeats=3, statistic="median")
    # repeat walls 1.0, 2.0, 4.0 -> throughputs 20, 10, 5; median 10
    reps = (RepeatRaw((0.1, 0.9), 1.0), RepeatRaw((1.0, 1.0), 2.0), RepeatRaw((3.0, 1.0), 4.0))
    m = summarize(spec(proto, batch=10), (RankRaw(0, reps, final_loss=0.5),))
    assert m.throughput == 10.0
    # the mean of per-step rates would give (100 + 11.1 + 10 + 10 + 3.33 + 10)/6: not what we report
    assert m.repeat_throughputs == (20.0, 10.0, 5.0)


def test_several_ranks_use_the_slowest_rank_and_the_global_batch() -> None:
    proto = Protocol(warmup=0, steps=2, repeats=1, statistic="median")
    s = PointSpec(framework="fake", model="resnet50", batch_size=8, protocol=proto, devices_per_node=2)
    fast = RankRaw(0, (RepeatRaw((0.5, 0.5), 1.0),), final_loss=1.0)
    slow = RankRaw(1, (RepeatRaw((1.0, 1.0), 2.0),), final_loss=1.0)
    assert repeat_throughputs((fast, slow), s.global_batch) == (16 * 2 / 2.0,)


def test_confidence_interval_and_cv() -> None:
    lo, hi = confidence_interval((10.0, 12.0, 14.0))
    # mean 12, sd 2, n 3: t(0.975, 2) = 4.302653 -> half width 4.9683
    assert (lo + hi) / 2 == pytest.approx(12.0)
    assert (hi - lo) / 2 == pytest.approx(4.302653 * 2 / 3**0.5, rel=1e-6)
    proto = Protocol(warmup=0, steps=1, repeats=3, statistic="mean")
    reps = tuple(RepeatRaw((w,), w) for w in (1.0, 1.0, 1.0))
    m = summarize(spec(proto, batch=4), (RankRaw(0, reps, final_loss=1.0),))
    assert m.cv == 0.0 and not m.noisy and m.ci_low == m.ci_high == 4.0


def test_noisy_flag_above_five_percent_cv() -> None:
    proto = Protocol(warmup=0, steps=1, repeats=3, statistic="mean")
    reps = tuple(RepeatRaw((w,), w) for w in (1.0, 1.3, 0.8))
    m = summarize(spec(proto), (RankRaw(0, reps, final_loss=1.0),))
    assert m.noisy and m.cv > 0.05
