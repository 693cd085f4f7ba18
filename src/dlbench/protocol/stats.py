"""Statistics derived from raw step times. Throughput has one definition, here:

    throughput of a repeat = global samples in its measured steps / wall time of those steps,

where on several ranks the wall time is the slowest rank's. A point's throughput is its preset's statistic
(mean or median) over repeats, with a Student-t confidence interval and the coefficient of variation from
MIN_REPEATS_FOR_SPREAD (3) repeats up; below that both are None and "noisy" is unknown, never false. The
wall time is the same whether the steps were timed in windows or one by one: the clock reads are contiguous.
"""

from __future__ import annotations

import math
import statistics

from dlbench.records import MIN_REPEATS_FOR_SPREAD, Metrics, RankRaw
from dlbench.spec import PointSpec

CI_LEVEL = 0.95
NOISY_CV = 0.05  # a point whose repeats vary by more than 5% is flagged as noisy
# A point is input-bound when more than 10% of its measured step time was spent waiting for the next batch
# (time in the loader's next(), summed over ranks, / wall time of the measured steps, summed over ranks).
INPUT_BOUND_SHARE = 0.1


def repeat_throughputs(ranks: tuple[RankRaw, ...], global_batch: int) -> tuple[float, ...]:
    """Throughput of each repeat: global samples / wall time of the slowest rank in that repeat."""
    n_repeats = {len(r.repeats) for r in ranks}
    if len(n_repeats) != 1:
        raise ValueError(f"ranks measured different numbers of repeats: {sorted(n_repeats)}")
    out = []
    for i in range(n_repeats.pop()):
        reps = [r.repeats[i] for r in ranks]
        steps = {rep.steps for rep in reps}
        if len(steps) != 1:
            raise ValueError(f"ranks measured different numbers of steps in repeat {i}: {sorted(steps)}")
        wall = max(rep.wall_s for rep in reps)
        if wall <= 0:
            raise ValueError(f"repeat {i} has a non-positive wall time {wall}")
        out.append(global_batch * steps.pop() / wall)
    return tuple(out)


def confidence_interval(samples: tuple[float, ...], level: float = CI_LEVEL) -> tuple[float, float]:
    """Student-t interval for the mean of the samples; (x, x) for a single sample."""
    n = len(samples)
    mean = statistics.fmean(samples)
    if n < 2:
        return mean, mean
    # Student t's quantile (what scipy.stats.t.ppf calls), without importing scipy.stats
    from scipy.special import stdtrit

    half = float(stdtrit(n - 1, (1 + level) / 2)) * statistics.stdev(samples) / math.sqrt(n)
    return mean - half, mean + half


def coefficient_of_variation(samples: tuple[float, ...]) -> float:
    """Sample standard deviation / mean; 0 for a single sample."""
    if len(samples) < 2:
        return 0.0
    return statistics.stdev(samples) / statistics.fmean(samples)


def summarize(spec: PointSpec, ranks: tuple[RankRaw, ...]) -> Metrics:
    """Every derived figure of a point, from its raw per-rank samples."""
    if not ranks:
        raise ValueError("no rank measured anything")
    per_repeat = repeat_throughputs(ranks, spec.global_batch)
    stat = spec.protocol.statistic
    value = statistics.median(per_repeat) if stat == "median" else statistics.fmean(per_repeat)
    spread = len(per_repeat) >= MIN_REPEATS_FOR_SPREAD  # below it: no CI, no CV, noisy unknown (n=1 says so)
    lo, hi = confidence_interval(per_repeat) if spread else (None, None)
    cv = coefficient_of_variation(per_repeat) if spread else None
    all_steps = [t for r in ranks for rep in r.repeats for t in rep.step_samples]
    device_steps = [t for r in ranks for rep in r.repeats for t in rep.device_step_s]
    peaks = [r.peak_memory_bytes for r in ranks if r.peak_memory_bytes is not None]
    allocator = [r.allocator_peak_bytes for r in ranks if r.allocator_peak_bytes is not None]
    losses = [r.final_loss for r in ranks if r.final_loss is not None]
    measured = sum(rep.wall_s for r in ranks for rep in r.repeats)
    waited = sum(r.input_wait_s for r in ranks)
    share = waited / measured if measured > 0 else 0.0
    return Metrics(
        throughput=value,
        statistic=stat,
        repeat_throughputs=per_repeat,
        ci_low=lo,
        ci_high=hi,
        ci_level=CI_LEVEL,
        cv=cv,
        median_step_s=statistics.median(all_steps),
        global_batch=spec.global_batch,
        peak_memory_bytes=max(peaks) if peaks else None,
        memory_kind=ranks[0].memory_kind,
        final_loss=losses[0] if losses else None,
        noisy=cv > NOISY_CV if cv is not None else None,
        input_wait_share=share,
        input_bound=share > INPUT_BOUND_SHARE,
        measured_steps=ranks[0].repeats[0].steps if ranks[0].repeats else 0,
        timing="per_step" if any(rep.step_times for r in ranks for rep in r.repeats) else "window",
        device_median_step_s=statistics.median(device_steps) if device_steps else None,
        allocator_peak_bytes=max(allocator) if allocator else None,
        allocator_kind=ranks[0].allocator_kind,
    )
