"""Power to detect (analysis/statistical_power.py): `compare` and `history` never say "no significant change" where their
samples could not have shown one; they say "not enough samples to detect X%: need N" and exit 3 (issue 24, item 3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from math import comb
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis.compare import FASTER, SAME, SLOWER, UNDETECTABLE, compare_points
from dlbench.analysis.history import build_series
from dlbench.analysis.statistical_power import TARGET_POWER, detectability, min_p, needed, power
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.rows import StoredPoint
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
ENV = Environment(
    {"framework": "fake", "framework_version": "1.0", "device": "cpu", "cpu_model": "test-cpu"}, {"hostname": "h"}
)


def point(steps: list[float], when: float = 0.0) -> PointResult:
    """One repeat of these step times (each its own sample), as a quick-preset point with 4 measured steps."""
    spec = PointSpec(framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, len(steps), 1, "median"))
    ranks = (RankRaw(0, (RepeatRaw(tuple(steps), sum(steps)),)),)
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), ENV, started=when - 1, finished=when)


FOUR = [0.100, 0.101, 0.099, 0.1005]


def test_the_smallest_p_is_scipys_exact_one() -> None:
    assert min_p(4, 4) == pytest.approx(2 / comb(8, 4))  # 0.029: the figure
    assert min_p(5, 5) == pytest.approx(2 / comb(10, 5)) and min_p(5, 5) < 0.01
    assert min_p(1, 30) > 0.01


@pytest.mark.parametrize("factor", [1 / 2.16, 1 / 0.745])  # the 2.16x speed-up and 0.745x slow-down
def test_four_against_four_steps_cannot_detect_any_change(factor: float) -> None:
    a, b = point(FOUR), point([t * factor for t in FOUR])
    pc = compare_points(a, b, target=0.05)
    assert pc.verdict == UNDETECTABLE and pc.verdict not in (SAME, FASTER, SLOWER)
    assert pc.note.startswith("not enough samples to detect 5%: need 5 per side")
    assert "smallest p with 4 against 4 is 0.029" in pc.note
    assert pc.ratio == pytest.approx(1 / factor, rel=1e-6) and pc.min_p == pytest.approx(2 / 70)
    assert pc.needed_per_side == 5
    # without a target effect the smallest p alone decides, and says the same
    assert compare_points(a, b).verdict == UNDETECTABLE


def test_needed_is_computed_and_really_detects() -> None:
    """N from the model is the first count whose simulated power reaches the target, and N - 1 does not."""
    rng = np.random.default_rng(3)
    a, b = np.exp(rng.normal(0, 0.03, 12)), np.exp(rng.normal(0, 0.03, 12))
    d = detectability(a, b, 0.05, 0.01)
    n = d.needed
    assert n > 5 and power(n, n, d.sigma, 0.05, 0.01) >= TARGET_POWER > power(n - 1, n - 1, d.sigma, 0.05, 0.01)
    assert needed(0.0, 0.05, 0.01) == 5  # no spread: only the smallest p limits it


def test_noisy_samples_for_a_small_target_are_not_enough_but_a_clear_change_is_still_called() -> None:
    rng = np.random.default_rng(0)
    noisy = [point(list(0.1 * np.exp(rng.normal(0, 0.3, 30)))) for _ in range(2)]
    pc = compare_points(*noisy, target=0.02)
    assert pc.verdict == UNDETECTABLE and pc.power is not None and pc.power < TARGET_POWER
    assert "need" in pc.note and "power" in pc.note
    quiet_a = point(list(0.1 * np.exp(rng.normal(0, 0.01, 30))))
    quiet_b = point(list(0.12 * np.exp(rng.normal(0, 0.01, 30))))
    assert compare_points(quiet_a, quiet_b, target=0.05).verdict == SLOWER


def _store(path: Path, *runs: PointResult) -> list[str]:
    store = Store(path)
    ids = []
    for p in runs:
        rid = store.create_run("fixture")
        store.add_point(rid, p)
        store.finish_run(rid, "done")
        ids.append(rid)
    store.close()
    return ids


def test_compare_cli_exits_3_and_names_the_samples_needed(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    a, b = _store(store_path, point(FOUR), point([t / 2.16 for t in FOUR]))
    code, out, err = cli("compare", a, b, "--store", str(store_path), "--fail-above", "5%")
    assert code == 3, err
    assert "no significant change" not in out
    assert "not enough samples to detect 5%: need 5 per side" in " ".join(err.split())
    code, out, _ = cli("compare", a, b, "--store", str(store_path), "--fail-above", "5%", "--format", "json")
    doc = json.loads(out)["points"][0]
    assert code == 3 and doc["verdict"] == UNDETECTABLE and doc["needed_per_side"] == 5


def test_history_says_a_jump_it_could_not_test_and_exits_3(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue: history drew a 7x jump between two 4-step points and said 'no significant change point'."""
    monkeypatch.setenv("COLUMNS", "250")
    first, jump = point(FOUR, when=1_790_000_000.0), point([t / 7 for t in FOUR], when=1_790_086_400.0)
    [s] = build_series([StoredPoint(1, "r1", first), StoredPoint(2, "r2", jump)])
    assert s.points[1].undetectable and s.changes == []
    _store(store_path, first, jump)
    code, out, err = cli("history", "-m", "resnet50", "--store", str(store_path))
    assert code == 3, err
    flat = " ".join(out.split())
    assert "not enough samples to detect 2%" in flat and "could not have shown one" in flat
    assert "could not have shown a change" in err
