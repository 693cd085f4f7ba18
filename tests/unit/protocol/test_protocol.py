"""The protocol's arithmetic, checked exactly with a fake clock whose steps take known times."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.protocol.runner import measure, window_sizes
from dlbench.protocol.stats import confidence_interval, repeat_throughputs, summarize
from dlbench.records import RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store


class ClockedTrainer:
    """Each step advances a fake clock: warm-up steps cost `warm`, measured ones follow `durations`; input
    takes `input_s` per batch. Records when the protocol synchronised and the device timer's marks."""

    def __init__(
        self, durations: list[float], warm: float, warmup: int, steps: int, input_s: float = 0.0, timer: bool = False
    ) -> None:
        self.now = 0.0
        self.durations = iter(durations)
        self.warm, self.warmup, self.steps, self.input_s = warm, warmup, steps, input_s
        self.count = 0
        self.syncs: list[int] = []  # the step count at each sync
        self.timer = DeviceTimer(self) if timer else None

    def next_batch(self) -> object:
        self.now += self.input_s
        return object()

    def train_step(self, batch: object) -> None:
        in_repeat = self.count % (self.warmup + self.steps)
        self.now += self.warm if in_repeat < self.warmup else next(self.durations)
        self.count += 1

    def sync(self) -> None:
        self.syncs.append(self.count)

    def step_timer(self) -> DeviceTimer | None:
        return self.timer

    def clock(self) -> float:
        return self.now


class DeviceTimer:
    """A device timer on the fake clock: marks around each step, read after a sync."""

    kind = "fake_events"

    def __init__(self, trainer: ClockedTrainer) -> None:
        self.trainer = trainer
        self.marks: list[float] = []
        self.spans: list[float] = []

    def start(self) -> None:
        self.marks.append(self.trainer.now)

    def stop(self) -> None:
        self.spans.append(self.trainer.now - self.marks.pop())

    def read(self) -> tuple[float, ...]:
        out, self.spans = tuple(self.spans), []
        return out


def spec(protocol: Protocol, batch: int = 32) -> PointSpec:
    return PointSpec(framework="fake", model="resnet50", batch_size=batch, protocol=protocol)


def test_window_sizes_split_evenly() -> None:
    assert window_sizes(100, 5) == (20,) * 5
    assert window_sizes(7, 3) == (3, 2, 2)
    assert window_sizes(2, 5) == (1, 1)


def test_warmup_is_never_timed_and_sync_happens_only_at_window_ends() -> None:
    proto = Protocol(warmup=3, steps=4, repeats=2, statistic="mean", windows=2)
    durations = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    t = ClockedTrainer(durations, warm=100.0, warmup=3, steps=4)
    m = measure(t, proto, clock=t.clock)
    assert [r.window_s for r in m.repeats] == [(1.0, 1.0), (0.5, 0.5)]
    assert [r.window_steps for r in m.repeats] == [(2, 2), (2, 2)]
    assert [r.wall_s for r in m.repeats] == [2.0, 1.0]
    assert all(r.step_times == () for r in m.repeats)
    assert t.count == 2 * (3 + 4)
    # per repeat: one sync after warm-up, then one at the end of each window; never after a single step
    assert t.syncs == [3, 5, 7, 10, 12, 14]


def test_sync_every_step_keeps_each_step_time() -> None:
    proto = Protocol(warmup=1, steps=3, repeats=1, statistic="mean", windows=2)
    t = ClockedTrainer([0.1, 0.2, 0.3], warm=5.0, warmup=1, steps=3)
    m = measure(t, proto, clock=t.clock, sync_every_step=True)
    [rep] = m.repeats
    assert rep.step_times == pytest.approx((0.1, 0.2, 0.3))
    assert [n for n, _ in rep.windows] == [1, 1, 1]
    assert [s for _, s in rep.windows] == pytest.approx([0.1, 0.2, 0.3])
    assert t.syncs == [1, 2, 3, 4]


def test_throughput_is_samples_over_wall_time_with_mean_statistic() -> None:
    proto = Protocol(warmup=1, steps=4, repeats=2, statistic="mean")
    t = ClockedTrainer([0.5] * 4 + [0.25] * 4, warm=9.0, warmup=1, steps=4)
    m = measure(t, proto, clock=t.clock)
    metrics = summarize(spec(proto), (RankRaw(rank=0, repeats=m.repeats, final_loss=1.0),))
    # repeat 1: 32*4/2.0 = 64 samples/s; repeat 2: 32*4/1.0 = 128 samples/s
    assert metrics.repeat_throughputs == (64.0, 128.0)
    assert metrics.throughput == 96.0
    assert metrics.median_step_s == pytest.approx(0.375)
    assert (metrics.statistic, metrics.timing, metrics.measured_steps) == ("mean", "window", 4)


def test_uneven_windows_give_the_same_throughput_as_per_step_timing() -> None:
    durations = [0.1, 0.3, 0.2, 0.4, 0.5]
    windowed = ClockedTrainer(list(durations), warm=1.0, warmup=1, steps=5)
    stepped = ClockedTrainer(list(durations), warm=1.0, warmup=1, steps=5)
    proto = Protocol(warmup=1, steps=5, repeats=1, statistic="mean", windows=2)
    a = measure(windowed, proto, clock=windowed.clock)
    b = measure(stepped, proto, clock=stepped.clock, sync_every_step=True)
    ta = summarize(spec(proto), (RankRaw(0, a.repeats, final_loss=1.0),)).throughput
    tb = summarize(spec(proto), (RankRaw(0, b.repeats, final_loss=1.0),)).throughput
    assert ta == pytest.approx(tb) == pytest.approx(32 * 5 / 1.5)
    assert a.repeats[0].window_steps == (3, 2)


def test_input_wait_is_timed_in_measured_steps_only() -> None:
    proto = Protocol(warmup=2, steps=3, repeats=2, statistic="mean")
    t = ClockedTrainer([0.1] * 6, warm=1.0, warmup=2, steps=3, input_s=0.05)
    m = measure(t, proto, clock=t.clock)
    assert m.input_wait_s == pytest.approx(2 * 3 * 0.05)
    # the wait is part of the measured wall time (the host waited for the batch inside the window)
    assert m.repeats[0].wall_s == pytest.approx(3 * 0.15)


def test_device_timer_marks_each_measured_step_and_forgets_warmup() -> None:
    proto = Protocol(warmup=2, steps=3, repeats=1, statistic="mean")
    t = ClockedTrainer([0.1, 0.2, 0.3], warm=7.0, warmup=2, steps=3, timer=True)
    m = measure(t, proto, clock=t.clock)
    assert m.repeats[0].device_step_s == pytest.approx((0.1, 0.2, 0.3))
    assert m.device_timer == "fake_events"
    metrics = summarize(spec(proto), (RankRaw(0, m.repeats, final_loss=1.0, device_timer=m.device_timer),))
    assert metrics.device_median_step_s == pytest.approx(0.2)


def test_minimum_time_raises_the_measured_steps_once() -> None:
    # steps of 0.1 s; 5 asked; at least 2 s per repeat -> 20 steps, calibrated once on 5 extra untimed steps
    proto = Protocol(warmup=1, steps=5, repeats=2, statistic="mean", min_time_s=2.0)
    t = ClockedTrainer([0.1] * 1000, warm=0.1, warmup=1, steps=1000)
    m = measure(t, proto, clock=t.clock)
    assert (m.steps, m.steps_asked, m.calibrated) == (20, 5, True)
    assert [r.steps for r in m.repeats] == [20, 20]
    assert all(r.wall_s == pytest.approx(2.0) for r in m.repeats)


def test_several_ranks_do_not_calibrate() -> None:
    proto = Protocol(warmup=0, steps=5, repeats=1, statistic="mean", min_time_s=2.0)
    t = ClockedTrainer([0.1] * 100, warm=0.1, warmup=0, steps=100)
    m = measure(t, proto, clock=t.clock, calibrate=False)
    assert (m.steps, m.calibrated) == (5, False)


def test_quick_preset_asks_a_minimum_time_on_gpus_only() -> None:
    from dlbench.spec import preset

    assert preset("quick").on("cpu").min_time_s == 0.0
    assert preset("quick").on("cuda").min_time_s > 0.0
    assert preset("dlperf").on("cuda").min_time_s == 0.0


def test_median_statistic_and_not_mean_of_step_rates() -> None:
    proto = Protocol(warmup=0, steps=2, repeats=3, statistic="median")
    # repeat walls 1.0, 2.0, 4.0 -> throughputs 20, 10, 5; median 10
    reps = (RepeatRaw((0.1, 0.9), 1.0), RepeatRaw((1.0, 1.0), 2.0), RepeatRaw((3.0, 1.0), 4.0))
    m = summarize(spec(proto, batch=10), (RankRaw(0, reps, final_loss=0.5),))
    assert m.throughput == 10.0
    # the mean of per-step rates would give (100 + 11.1 + 10 + 10 + 3.33 + 10)/6: not what we report
    assert m.repeat_throughputs == (20.0, 10.0, 5.0)
    assert m.timing == "per_step"


def test_several_ranks_use_the_slowest_rank_and_the_global_batch() -> None:
    proto = Protocol(warmup=0, steps=2, repeats=1, statistic="median")
    s = PointSpec(framework="fake", model="resnet50", batch_size=8, protocol=proto, devices_per_node=2)
    fast = RankRaw(0, (RepeatRaw((), 1.0, window_s=(1.0,), window_steps=(2,)),), final_loss=1.0)
    slow = RankRaw(1, (RepeatRaw((), 2.0, window_s=(2.0,), window_steps=(2,)),), final_loss=1.0)
    assert repeat_throughputs((fast, slow), s.global_batch) == (16 * 2 / 2.0,)


def test_old_records_read_as_one_window_per_step() -> None:
    old = RepeatRaw.from_dict({"step_times": [0.5, 0.25], "wall_s": 0.75})
    assert (old.steps, old.windows, old.step_samples) == (2, ((1, 0.5), (1, 0.25)), (0.5, 0.25))
    rank = RankRaw.from_dict(
        {
            "rank": 0,
            "repeats": [{"step_times": [0.5], "wall_s": 0.5}],
            "peak_memory_bytes": 1,
            "memory_kind": "rss",
            "final_loss": 1.0,
            "input_wait_s": 0.0,
            "param_checksum": None,
        }
    )
    assert rank.allocator_kind == "" and rank.repeats[0].device_step_s == ()


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


CliResult = tuple[int, str, str]


def test_sync_every_step_from_the_cli_times_each_step_and_is_its_own_identity(
    cli: Callable[..., CliResult], store_path: Path
) -> None:
    args = (
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "--steps",
        "4",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--store",
        str(store_path),
    )
    assert cli(*args)[0] == 0
    assert cli(*args, "--sync-every-step")[0] == 0
    windowed, stepped = [p.result for p in Store(store_path, readonly=True).points()]
    assert not windowed.spec.sync_every_step and stepped.spec.sync_every_step
    assert windowed.spec.key() != stepped.spec.key()
    assert len(stepped.ranks[0].repeats[0].step_times) == 4
