"""The store keeps every raw sample, opens old stores by migrating them forward, and refuses bad paths."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dlbench.protocol.stats import summarize
from dlbench.results.schema import SCHEMA_VERSION, Environment, PointResult, RankRaw, RepeatRaw
from dlbench.results.store import Store, StoreError, resolve_path
from dlbench.spec import PointSpec, preset

FIXTURES = Path(__file__).parents[1] / "fixtures"


def result(status: str = "ok") -> PointResult:
    spec = PointSpec(framework="torch", model="resnet50", batch_size=4, protocol=preset("quick"))
    ranks = (RankRaw(0, tuple(RepeatRaw((0.1, 0.2, 0.1, 0.1, 0.1), 0.6) for _ in range(3)), 123, "rss", 2.5),)
    metrics = summarize(spec, ranks) if status == "ok" else None
    return PointResult(spec=spec, status=status, ranks=ranks if metrics else (), metrics=metrics,  # type: ignore[arg-type]
                       env=Environment({"framework": "torch", "device_model": "cpu"}, {"hostname": "h"}),
                       error=None if status == "ok" else "boom", started=1.0, finished=2.0)


def test_round_trip_keeps_raw_samples_metrics_and_env(store_path: Path) -> None:
    store = Store(store_path)
    run = store.create_run("dlbench run", meta={"preset": "quick"})
    store.add_point(run, result())
    store.add_point(run, result("oom"))
    store.finish_run(run, "done")
    again = Store(store_path, readonly=True)
    [r] = again.runs()
    assert (r.id, r.status, r.points, r.meta) == (run, "done", 2, {"preset": "quick"})
    ok, oom = [p.result for p in again.points([run])]
    assert ok == result()
    assert ok.ranks[0].repeats[0].step_times == (0.1, 0.2, 0.1, 0.1, 0.1)
    assert (oom.status, oom.error, oom.metrics) == ("oom", "boom", None)
    assert again.done_keys(run) == {result().spec.key()}
    assert again.get_run(run[:15]).id == run


def test_store_uses_wal_and_current_schema(store_path: Path) -> None:
    store = Store(store_path)
    assert store.schema_version() == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrates_a_version_1_store_forward(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript((FIXTURES / "store_v1.sql").read_text())
    db.close()
    store = Store(path)
    assert store.schema_version() == SCHEMA_VERSION
    [run] = store.runs()
    assert run.kind == "run" and run.points == 1
    [p] = store.points()
    assert p.result.env.identity["framework_version"] == "2.13.0+cpu"
    assert p.result.env.descriptive["hostname"] == "old-host"
    assert "hostname" not in p.result.env.identity
    assert p.result.ranks[0].repeats[2].wall_s == 10.0


def test_newer_store_is_refused(store_path: Path) -> None:
    Store(store_path).db.execute("UPDATE schema_meta SET value='999'")
    with pytest.raises(StoreError, match="newer than this dlbench"):
        Store(store_path)


def test_unwritable_and_missing_stores(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(blocker / "sub" / "results.db")
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "none.db", readonly=True)
    with pytest.raises(StoreError, match="no run"):
        Store(tmp_path / "s.db").get_run("nope")


def test_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_STORE", str(tmp_path))
    assert resolve_path() == tmp_path / "results.db"
    assert resolve_path(tmp_path / "x.db") == tmp_path / "x.db"
    monkeypatch.delenv("DLBENCH_STORE")
    assert resolve_path() == Path("dlbench-results") / "results.db"
