"""Steps to target over N runs against reference convergence points, the MLPerf way (#44): olympic scoring (the
fastest and the slowest run dropped from 3 runs on, at most one run that did not converge, counted as the
slowest), then one-sided t-tests at ALPHA on both sides against the reference's runs: significantly more steps
reads `slower`, significantly fewer `faster than reference` (MLPerf rejects such a submission: its
hyper-parameters are not the reference's). And the power of that test: the probability that a candidate whose
steps are (1 + effect) times the reference's is called `slower` at N runs, simulated through the very test
(analysis/statistical_power.py's convention: DRAWS seeded draws, TARGET_POWER).

The test is Student's two-sample t-test with the variance pooled over both sides; with one kept candidate run the
reference's variance stands for both. A step count is known to one reading interval K (a curve is read every K
steps), so the spread is never taken below K / sqrt(12), the spread of that rounding alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
DEFAULT_RUNS = 1  # --converge-runs: runs per configuration unless asked
OLYMPIC_FROM = 3  # runs from which the fastest and the slowest are dropped
EFFECT = 0.25  # the slowdown whose detection probability a verdict states
MAX_RUNS_SHOWN = 50  # runs_needed looks no further


@dataclass(frozen=True)
class Kept:
    """The candidate's runs after olympic scoring: the steps kept, and what was dropped or failed."""

    steps: tuple[float, ...]
    runs: int
    dropped: int
    failed: int  # runs that did not reach the target (at most one may, counted as the slowest)

    @property
    def ok(self) -> bool:
        """Whether enough runs converged to be scored (none failed below OLYMPIC_FROM runs, at most one above)."""
        return bool(self.steps) and (self.failed == 0 or (self.runs >= OLYMPIC_FROM and self.failed <= 1))

    def describe(self) -> str:
        """How the runs were scored, in words."""
        if self.runs == 1:
            return "1 run"
        if self.dropped:
            failed = f", {self.failed} not converged (counted as the slowest)" if self.failed else ""
            return f"{self.runs} runs, fastest and slowest dropped{failed}: mean of {len(self.steps)}"
        return f"{self.runs} runs (fewer than {OLYMPIC_FROM}: none dropped)"


def olympic(steps: Sequence[int | None]) -> Kept:
    """Olympic scoring of runs' steps to target (None: the run did not converge, counted as the slowest)."""
    failed = sum(1 for s in steps if s is None)
    done = sorted(float(s) for s in steps if s is not None)
    ordered = done + [math.inf] * failed
    if len(steps) >= OLYMPIC_FROM:
        kept = [s for s in ordered[1:-1] if math.isfinite(s)] if failed <= 1 else []
        return Kept(tuple(kept), len(steps), 2, failed)
    return Kept(tuple(done) if failed == 0 else (), len(steps), 0, failed)


@dataclass(frozen=True)
class TTest:
    """A candidate's kept runs against the reference's: the one-sided p-values and what they say."""

    candidate_mean: float
    reference_mean: float
    p_slower: float
    p_faster: float
    df: int

    @property
    def call(self) -> str:
        """'slower', 'faster' or 'same' at ALPHA."""
        if self.p_slower < ALPHA:
            return "slower"
        if self.p_faster < ALPHA:
            return "faster"
        return "same"


def spread(reference: Sequence[float], every: int) -> float:
    """The reference's sample standard deviation, never below the rounding of a reading interval."""
    s = statistics.stdev(reference) if len(reference) > 1 else 0.0
    return max(s, every / math.sqrt(12))


def _pooled(kept: Sequence[float], reference: Sequence[float], every: int) -> tuple[float, int]:
    n, k = len(reference), len(kept)
    s_r = spread(reference, every)
    if k < 2:
        return s_r, max(n - 1, 1)
    s_c = max(statistics.stdev(kept), every / math.sqrt(12))
    df = k + n - 2
    return math.sqrt(((k - 1) * s_c**2 + (n - 1) * s_r**2) / df), df


def ttest(kept: Sequence[float], reference: Sequence[float], every: int) -> TTest:
    """Student's pooled t-test of the kept runs' mean steps against the reference runs', one-sided each way."""
    if not kept or len(reference) < 2:
        raise ValueError("a t-test needs at least one kept run and two reference runs")
    s_p, df = _pooled(kept, reference, every)
    mc, mr = statistics.fmean(kept), statistics.fmean(reference)
    t = (mc - mr) / (s_p * math.sqrt(1 / len(kept) + 1 / len(reference)))
    from scipy import stats as sps  # NumPy and SciPy where used: a point's controller imports this module

    return TTest(mc, mr, float(sps.t.sf(t, df)), float(sps.t.cdf(t, df)), df)


def acceptance(reference: Sequence[float], every: int, runs: int = 1) -> tuple[float, float]:
    """The mean steps of the kept runs that read neither `faster` nor `slower` at `runs` runs: (lower, upper)."""
    kept = kept_count(runs)
    s_r = spread(reference, every)
    df = max(len(reference) - 1, 1) if kept < 2 else kept + len(reference) - 2
    from scipy import stats as sps

    half = float(sps.t.ppf(1 - ALPHA, df)) * s_r * math.sqrt(1 / kept + 1 / len(reference))
    m = statistics.fmean(reference)
    return max(0.0, m - half), m + half


def kept_count(runs: int) -> int:
    """Runs olympic scoring keeps of `runs`."""
    return runs - 2 if runs >= OLYMPIC_FROM else runs


def detect_power(reference: Sequence[float], every: int, runs: int, effect: float = EFFECT) -> float:
    """The probability that `runs` candidate runs whose steps are (1 + effect) times the reference's, spread as
    the reference's runs are (normal), read `slower` against these reference runs: simulated (DRAWS seeded
    draws) through olympic scoring and the very test."""
    if len(reference) < 2 or runs < 1:
        return 0.0
    m, s = statistics.fmean(reference), spread(reference, every)
    import numpy as np
    from scipy import stats as sps

    from dlbench.analysis.statistical_power import DRAWS, SEED

    rng = np.random.default_rng(SEED)
    draws = np.sort(rng.normal(m * (1 + effect), s, (DRAWS, runs)), axis=1)
    kept = draws[:, 1:-1] if runs >= OLYMPIC_FROM else draws
    k, n = kept.shape[1], len(reference)
    if k >= 2:
        s_c = np.maximum(kept.std(axis=1, ddof=1), every / math.sqrt(12))
        s_r = spread(reference, every)
        df = k + n - 2
        s_p = np.sqrt(((k - 1) * s_c**2 + (n - 1) * s_r**2) / df)
    else:
        df, s_p = max(n - 1, 1), np.full(DRAWS, spread(reference, every))
    t = (kept.mean(axis=1) - m) / (s_p * math.sqrt(1 / k + 1 / n))
    return float(np.mean(sps.t.sf(t, df) < ALPHA))


def runs_needed(reference: Sequence[float], every: int, effect: float = EFFECT) -> int | None:
    """The fewest runs at which a slowdown of `effect` is detected with TARGET_POWER (None: not up to
    MAX_RUNS_SHOWN)."""
    from dlbench.analysis.statistical_power import TARGET_POWER

    for runs in range(1, MAX_RUNS_SHOWN + 1):
        if detect_power(reference, every, runs, effect) >= TARGET_POWER:
            return runs
    return None


def power_line(reference: Sequence[float], every: int, runs: int, effect: float = EFFECT) -> str:
    """'a 25% slowdown is detected with probability P at N runs' (and how many runs reach TARGET_POWER)."""
    from dlbench.analysis.statistical_power import TARGET_POWER

    p = detect_power(reference, every, runs, effect)
    need = runs_needed(reference, every, effect)
    more = (
        f"; {need} runs reach {TARGET_POWER:.0%}"
        if need is not None and need != runs and p < TARGET_POWER
        else (f"; not even {MAX_RUNS_SHOWN} runs reach {TARGET_POWER:.0%}" if need is None else "")
    )
    return f"a {effect:.0%} slowdown is detected with probability {p:.2f} at {runs} run{'s' if runs != 1 else ''}{more}"
