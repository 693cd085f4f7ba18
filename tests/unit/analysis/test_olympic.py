"""Olympic scoring, the t-tests against reference runs and their power (analysis/olympic.py), checked against
figures computed here by hand or from tables."""

from __future__ import annotations

import math
import statistics

import pytest

from dlbench.analysis.olympic import acceptance, detect_power, olympic, power_line, runs_needed, ttest


def test_olympic_scoring_drops_the_fastest_and_the_slowest_from_three_runs() -> None:
    five = olympic([300, 100, 200, 250, 150])
    assert five.steps == (150.0, 200.0, 250.0) and five.ok and "dropped" in five.describe()
    one_failed = olympic([300, None, 200, 250, 150])  # the failure counts as the slowest and is dropped
    assert one_failed.steps == (200.0, 250.0, 300.0) and one_failed.ok and one_failed.failed == 1
    assert not olympic([300, None, None, 250, 150]).ok  # at most one run may fail
    assert not olympic([None, 100]).ok and olympic([100, 120]).steps == (100.0, 120.0)


def test_the_t_test_is_students_pooled_one_sided_test() -> None:
    ref = [100.0, 110.0, 120.0, 105.0, 115.0]
    cand = [150.0, 160.0, 170.0]
    t = ttest(cand, ref, every=10)
    # By hand: pooled variance ((3-1) 100 + (5-1) 62.5) / 6 = 75; t = 50 / sqrt(75 (1/3 + 1/5)) = 7.9057
    from scipy import stats

    assert t.p_slower == pytest.approx(stats.t.sf(50 / math.sqrt(75 * (1 / 3 + 1 / 5)), 6))
    assert t.call == "slower" and ttest([60.0], ref, 10).call == "faster" and ttest([112.0], ref, 10).call == "same"


def test_the_acceptance_edges_agree_with_the_test() -> None:
    ref = [100.0, 110.0, 120.0, 105.0, 115.0]
    lo, hi = acceptance(ref, 10, runs=1)
    assert ttest([hi + 0.5], ref, 10).call == "slower" and ttest([hi - 0.5], ref, 10).call == "same"
    assert ttest([lo - 0.5], ref, 10).call == "faster"
    assert statistics.fmean([lo, hi]) == pytest.approx(110.0)


def test_power_grows_with_runs_and_with_the_effect() -> None:
    ref = [200.0, 230.0, 220.0, 210.0, 240.0]
    one, five = detect_power(ref, 10, 1), detect_power(ref, 10, 5)
    assert 0 <= one < five <= 1
    assert detect_power(ref, 10, 3, effect=0.5) > detect_power(ref, 10, 3, effect=0.1)
    need = runs_needed(ref, 10)
    assert need is not None and detect_power(ref, 10, need) >= 0.8
    assert "a 25% slowdown is detected with probability" in power_line(ref, 10, 1)
    wide = [50.0, 200.0, 130.0, 90.0, 170.0]  # ResNet-50's scatter: little power at one run
    assert detect_power(wide, 10, 1) < 0.3
