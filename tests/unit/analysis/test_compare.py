"""`dlbench compare`: honest verdicts from raw samples, warnings on different machines, CI exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis.compare import CONTENDED, FASTER, SAME, SLOWER, compare_points, compare_runs, verdict
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store, StoredPoint

CliResult = tuple[int, str, str]
IDENTITY = {"device": "cpu", "device_model": "AMD EPYC", "framework": "fake", "framework_version": "1.0"}


def make_point(
    step_s: float | list[float],
    noise: float = 0.02,
    seed: int = 0,
    repeats: int = 3,
    steps: int = 10,
    identity: dict[str, str] | None = None,
    batch: int = 8,
    status: str = "ok",
) -> PointResult:
    """Synthetic raw step times: step_s per repeat (one value for all, or one per repeat), times (1 + noise N(0,1))."""
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=batch,
        protocol=Protocol(warmup=1, steps=steps, repeats=repeats, statistic="median"),
    )
    env = Environment(identity=identity or IDENTITY)
    if status != "ok":
        return PointResult(spec, status, env=env, error="out of memory")  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    means = step_s if isinstance(step_s, list) else [step_s] * repeats
    reps = []
    for mean in means:
        t = mean * np.clip(1 + noise * rng.standard_normal(steps), 0.2, None)
        reps.append(RepeatRaw(tuple(float(x) for x in t), float(t.sum())))
    ranks = (RankRaw(0, tuple(reps)),)
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), env)


def _stored(*points: PointResult) -> list[StoredPoint]:
    return [StoredPoint(i, "r", p) for i, p in enumerate(points)]


def _one(a: PointResult, b: PointResult) -> str:
    return compare_points(a, b).verdict


def test_identical_runs_no_significant_change() -> None:
    a = make_point(0.01, seed=1)
    pc = compare_points(a, a)
    assert pc.verdict == SAME and pc.ratio == pytest.approx(1.0) and pc.p_value == 1.0
    assert pc.ci_low is not None and pc.ci_high is not None and pc.ci_low <= 1.0 <= pc.ci_high


def test_same_distribution_no_significant_change() -> None:
    assert _one(make_point(0.01, seed=1), make_point(0.01, seed=2)) == SAME


def test_twenty_percent_slower_steps() -> None:
    pc = compare_points(make_point(0.010, seed=1), make_point(0.012, seed=2))
    assert pc.verdict == SLOWER
    assert pc.ratio == pytest.approx(1 / 1.2, rel=0.03)
    assert pc.ci_high is not None and pc.ci_high < 1.0
    assert _one(make_point(0.012, seed=1), make_point(0.010, seed=2)) == FASTER


def test_noisy_samples_give_no_false_verdict() -> None:
    false = [
        s
        for s in range(20)
        if _one(make_point(0.01, noise=0.3, seed=2 * s), make_point(0.01, noise=0.3, seed=2 * s + 1)) != SAME
    ]
    assert false == []


def test_one_disturbed_repeat_is_not_a_regression() -> None:
    """Two quiet repeats and one 25% slower (a busy machine): the bootstrap over repeats keeps the CI wide."""
    a = make_point(0.01, noise=0.01, seed=1, steps=30)
    b = make_point([0.01, 0.0125, 0.01], noise=0.01, seed=2, steps=30)
    pc = compare_points(a, b)
    assert pc.p_value is not None and pc.p_value < 0.01  # the steps alone would have called it
    assert pc.verdict == SAME


def test_tiny_significant_change_is_below_the_minimum_effect() -> None:
    a, b = make_point(0.0100, noise=0.001, seed=1, steps=50), make_point(0.0101, noise=0.001, seed=2, steps=50)
    pc = compare_points(a, b)
    assert pc.p_value is not None and pc.p_value < 1e-6
    assert pc.verdict == SAME


def test_verdict_needs_all_three() -> None:
    assert verdict(0.8, (0.7, 0.9), 0.001) == SLOWER
    assert verdict(0.8, (0.7, 1.01), 0.001) == SAME  # CI crosses 1
    assert verdict(0.8, (0.7, 0.9), 0.2) == SAME  # not significant
    assert verdict(0.99, (0.985, 0.995), 0.001) == SAME  # under the minimum effect


def test_failed_point_is_not_comparable() -> None:
    pc = compare_points(make_point(0.01), make_point(0.01, status="oom"))
    assert pc.verdict == "not comparable" and "oom" in pc.note


def test_mismatched_identity_warns_naming_the_keys() -> None:
    other = {**IDENTITY, "device_model": "Intel Xeon", "framework_version": "1.1"}
    c = compare_runs("a", _stored(make_point(0.01)), "b", _stored(make_point(0.01, seed=3, identity=other)))
    assert set(c.identity_diffs) == {"device_model", "framework_version"}
    assert len(c.warnings) == 1
    assert "device_model: AMD EPYC -> Intel Xeon" in c.warnings[0] and "framework_version: 1.0 -> 1.1" in c.warnings[0]
    assert c.points  # still compared, never silently


def test_unmatched_points_are_listed() -> None:
    c = compare_runs("a", _stored(make_point(0.01), make_point(0.01, batch=16)), "b", _stored(make_point(0.01)))
    assert len(c.points) == 1 and c.only_a == ("fake resnet50 bs16 fp32 1n1c",) and c.only_b == ()


# --- through the CLI, on a store -----------------------------------------------------------------------------


def _store(path: Path, *runs: list[PointResult]) -> list[str]:
    store = Store(path)
    ids = []
    for points in runs:
        rid = store.create_run("fixture")
        for p in points:
            store.add_point(rid, p)
        store.finish_run(rid, "done")
        ids.append(rid)
    store.close()
    return ids


def test_cli_identical_runs(store_path: Path, cli: Callable[..., CliResult]) -> None:
    a, b = _store(store_path, [make_point(0.01, seed=1)], [make_point(0.01, seed=1)])
    code, out, err = cli("compare", a, b, "--store", str(store_path), "--fail-above", "5%")
    assert code == 0, err
    assert SAME in out and "warning" not in err


def test_cli_regression_exit_code_and_json(store_path: Path, cli: Callable[..., CliResult]) -> None:
    a, b = _store(store_path, [make_point(0.010, seed=1)], [make_point(0.012, seed=2)])
    code, out, err = cli("compare", a, b, "--store", str(store_path), "--fail-above", "5%")
    assert code == 1
    assert SLOWER in out and "significant regression" in err
    code, out, _ = cli("compare", a, b, "--store", str(store_path), "--fail-above", "25%", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["points"][0]["verdict"] == SLOWER and doc["points"][0]["change"] < -0.1
    assert doc["run_a"] == a and doc["run_b"] == b and "Mann-Whitney" in doc["method"]


def test_cli_mismatched_machine_warns(store_path: Path, cli: Callable[..., CliResult]) -> None:
    other = {**IDENTITY, "device_model": "Intel Xeon"}
    a, b = _store(store_path, [make_point(0.01)], [make_point(0.01, seed=3, identity=other)])
    code, out, err = cli("compare", a, b, "--store", str(store_path))
    assert code == 0 and SAME in out
    assert re.search(r"warning:.*device_model: AMD EPYC -> Intel Xeon", err.replace("\n", " "))


@pytest.mark.parametrize(
    "args,needle",
    [
        (("nope", "nope2"), "no run 'nope'"),
        (("RUN_A", "RUN_B", "--fail-above", "lots"), "5%"),
    ],
)
def test_cli_bad_input(store_path: Path, cli: Callable[..., CliResult], args: tuple[str, ...], needle: str) -> None:
    a, b = _store(store_path, [make_point(0.01)], [make_point(0.01)])
    args = tuple(a if x == "RUN_A" else b if x == "RUN_B" else x for x in args)
    code, _, err = cli("compare", *args, "--store", str(store_path))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def _fake_run(store: Path, sleep: str) -> str:
    env = {**os.environ, "DLBENCH_FAKE": f"sleep:{sleep}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench",
            "run",
            "-f",
            "fake",
            "-m",
            "resnet50",
            "--steps",
            "10",
            "--warmup",
            "1",
            "--threads",  # the same count on both sides, whatever the load (auto would follow it)
            "1",
            "--store",
            str(store),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r"\(run ([0-9a-f-]+)[;)]", proc.stdout.replace("\n", " "))
    assert m, proc.stdout
    return m.group(1)


def test_fake_backend_twenty_percent_slower(store_path: Path, cli: Callable[..., CliResult]) -> None:
    """Real workers: the fake backend's steps sleep 50 ms, then 60 ms (20% longer steps, 1/1.2 throughput).
    Steps this long keep a busy machine's wake-up latency from diluting the difference."""
    a = _fake_run(store_path, "0.05")
    b = _fake_run(store_path, "0.06")
    code, out, _ = cli("compare", a, b, "--store", str(store_path), "--format", "json", "--fail-above", "5%")
    doc = json.loads(out)
    point = doc["points"][0]
    if point["verdict"] == CONTENDED:  # a side ran while others held its cores: no verdict is the honest answer
        assert code == 6 and point["contended"] in ("A", "B", "A and B"), point
    else:
        assert point["verdict"] == SLOWER and code == 1, point
    assert point["ratio"] == pytest.approx(1 / 1.2, abs=0.08)
    assert doc["warnings"] == []
