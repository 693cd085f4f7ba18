"""Sweeps: every point committed at once, failures recorded, resume after kill -9 and Ctrl-C, max batch found."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.envs.interpreters import NotInstalled
from dlbench.launch.point import execute
from dlbench.launch.registry import Launchers
from dlbench.runapi import matrix as sweep_mod
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]

SUITE = """\
name: fake-sweep
device: cpu
protocol: {{preset: quick, warmup: 1, steps: 3, repeats: 2}}
timeout: {timeout}
memory_limit: 64GiB
axes:
  framework: fake
  model: {models}
  batch: [min, fixed, max]
max_batch: {{lo: 1, hi: {hi}}}
"""


def write_suite(tmp_path: Path, models: str = "[resnet50, alexnet, vgg16]", timeout: float = 60, hi: int = 64) -> Path:
    f = tmp_path / "suite.yaml"
    f.write_text(SUITE.format(models=models, timeout=timeout, hi=hi))
    return f


def sweep_rows(db: Path) -> list[tuple[str, str, int, str]]:
    """(model, batch group, batch, status) of the sweep run's points, read with plain sqlite3."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT p.model, json_extract(p.extra_json, '$.batch_group'), p.batch_size, p.status "
            "FROM points p JOIN runs r ON r.id = p.run_id WHERE r.kind = 'sweep' ORDER BY p.id"
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]
    finally:
        con.close()


def sweep_run_id(db: Path) -> str:
    return next(r.id for r in Store(db, readonly=True).runs() if r.kind == "sweep")


def test_sweep_records_every_point_and_goes_past_failures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "resnet50=oom_above:37,alexnet=hang,vgg16=raise")
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "s.db"
    code, out, err = cli("sweep", str(write_suite(tmp_path, timeout=4)), "--store", str(db))
    assert code == 1, err  # every point ran and is stored, but some failed: exit 1 says so
    rows = sweep_rows(db)
    by = {(m, g): (b, s) for m, g, b, s in rows}
    assert by[("resnet50", "min")] == (1, "ok") and by[("resnet50", "fixed")] == (8, "ok")
    assert by[("resnet50", "max")] == (37, "ok")
    assert by[("vgg16", "min")][1] == by[("vgg16", "fixed")][1] == "error"
    assert by[("alexnet", "min")][1] == "timeout"
    assert (by[("alexnet", "max")][1], by[("vgg16", "max")][1]) == ("timeout", "error")  # failed searches, kept
    assert len(rows) == 9
    assert Store(db).get_run(sweep_run_id(db)).status == "done"
    assert "max batch size" in out and "37" in out


def test_a_framework_that_is_not_installed_is_recorded_as_unsupported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    def missing(framework: str, release: str | None = None) -> str:
        raise NotInstalled(f"framework {framework} is not installed: run: dlbench setup {framework}")

    monkeypatch.setattr(sweep_mod, "interpreter_for", missing)
    db = tmp_path / "s.db"
    code, _, err = cli("sweep", str(write_suite(tmp_path, models="resnet50", hi=4)), "--store", str(db))
    assert code == 0, err
    rows = sweep_rows(db)
    assert [(g, s) for _, g, _, s in rows] == [("min", "unsupported"), ("fixed", "unsupported"), ("max", "unsupported")]
    errors = [p.result.error for p in Store(db).points()]
    assert all("not installed" in (e or "") for e in errors)


def test_max_equal_to_another_group_is_one_point(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:8")  # resnet50's CPU fixed batch is 8
    db = tmp_path / "s.db"
    code, _, err = cli("sweep", str(write_suite(tmp_path, models="resnet50", hi=16)), "--store", str(db))
    assert code == 0, err
    assert [(g, b) for _, g, b, _ in sweep_rows(db)] == [("min", 1), ("fixed+max", 8)]


def _sigint_default() -> None:
    """In the child before exec: Ctrl-C's default. A shell script's background job (`bash .ci/run &`) ignores
    SIGINT, and an ignored signal stays ignored across exec, so the sweep would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(suite: Path, db: Path, fake: str = "sleep:0.05") -> subprocess.Popen[bytes]:
    env = {**os.environ, "DLBENCH_FAKE": fake}
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench", "sweep", str(suite), "--store", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_default,
    )


def wait_for_points(db: Path, n: int, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if db.exists() and len(sweep_rows(db)) >= n:
                return
        except sqlite3.OperationalError:  # the sweep has created the file but not yet its tables
            pass
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} points after {timeout} s")


def test_resume_after_kill_9_runs_only_what_is_missing(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    suite, db = write_suite(tmp_path, models="[resnet50, alexnet, vgg16, bert_base]", hi=4), tmp_path / "s.db"
    proc = start_sweep(suite, db)
    wait_for_points(db, 2, proc)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    before = sweep_rows(db)
    assert 2 <= len(before) < 12
    store = Store(db)  # the store opens after the kill
    run_id = sweep_run_id(db)
    assert store.get_run(run_id).status == "interrupted"  # stored "running", but its controller is dead
    ids_before = [p.id for p in store.points([run_id])]
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.05")
    code, _, err = cli("sweep", "--resume", run_id, "--store", str(db))
    assert code == 0, err
    after = sweep_rows(db)
    assert after[: len(before)] == before  # finished points kept as they were
    assert [p.id for p in Store(db).points([run_id])][: len(ids_before)] == ids_before
    groups = [(m, g) for m, g, _, _ in after]
    assert len(groups) == len(set(groups)) == 12  # the same points as an uninterrupted sweep, none twice
    assert {g for _, g in groups} == {"min", "fixed", "max"}
    assert Store(db).get_run(run_id).status == "done"
    searches = [r for r in Store(db).runs() if r.kind == "maxbatch"]
    probed = [(r.meta["search_key"], p.result.spec.batch_size) for r in searches for p in Store(db).points([r.id])]
    assert len(probed) == len(set(probed)) >= 4  # no probe ran twice, even across the kill
    code, _, _ = cli("sweep", "--resume", run_id, "--store", str(db))  # nothing left: runs nothing
    assert code == 0 and sweep_rows(db) == after


def test_ctrl_c_stops_cleanly_and_marks_the_run_interrupted(tmp_path: Path) -> None:
    suite, db = write_suite(tmp_path, models="[resnet50, alexnet]", hi=2), tmp_path / "s.db"
    proc = start_sweep(suite, db, fake="sleep:0.3")  # ~6 s a point: the sweep cannot end before the signal lands
    wait_for_points(db, 1, proc)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert "--resume" in err.decode()
    store = Store(db)
    assert store.get_run(sweep_run_id(db)).status == "interrupted"
    assert len(sweep_rows(db)) >= 1


def fake_spec(**kw: object) -> PointSpec:
    return PointSpec(
        **{
            **dict(
                framework="fake",
                model="resnet50",
                batch_size=4,  # type: ignore[arg-type]
                protocol=Protocol(2, 5, 2, "median"),
                timeout_s=30.0,
            ),
            **kw,
        }
    )


def test_slow_loader_is_flagged_input_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "slow_input:0.02")
    r = execute(fake_spec(), Launchers())
    assert r.metrics is not None and r.metrics.input_bound
    assert 0.8 < r.metrics.input_wait_share < 1.0  # 20 ms of waiting per ~21 ms step, warm-up excluded
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.02")
    r = execute(fake_spec(), Launchers())
    # synthetic input: the protocol still times next_batch(), which costs microseconds against 20 ms steps
    assert r.metrics is not None and not r.metrics.input_bound and r.metrics.input_wait_share < 0.01


def test_run_exit_codes_say_what_happened(
    monkeypatch: pytest.MonkeyPatch, store_path: Path, cli: Callable[..., CliResult]
) -> None:
    quick = (
        "-f",
        "fake",
        "-m",
        "resnet50",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--store",
        str(store_path),
    )
    assert cli("run", *quick)[0] == 0
    assert cli("run", *quick, "--compile")[0] == 0  # refused as unsupported (the fake has no compiler): not a failure
    monkeypatch.setenv("DLBENCH_FAKE", "raise")
    assert cli("run", *quick)[0] == 1
    statuses = [p.result.status for p in Store(store_path, readonly=True).points()]
    assert sorted(statuses) == ["error", "ok", "unsupported"]


def test_framework_option_keeps_those_frameworks_as_in_run(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    suite = tmp_path / "two.yaml"
    suite.write_text(
        SUITE.format(models="resnet50", timeout=60, hi=4).replace("framework: fake", "framework: [fake, torch]")
    )
    db = tmp_path / "s.db"
    code, out, err = cli("sweep", str(suite), "-f", "fake", "--dry-run", "--store", str(db))
    assert code == 0, err
    assert "fake" in out and "torch" not in out
    code, both, err = cli("sweep", str(suite), "-f", "all", "--dry-run", "--store", str(db))
    assert code == 0 and "torch" in both, err
    code, _, err = cli("sweep", "--resume", "20261101-000000-abcd", "-f", "fake", "--store", str(db))
    assert code == 2 and "keeps the frameworks it started with" in err and len(err.strip().splitlines()) == 1
