"""Exit codes as the README states them (#25): a point that ran but could not be stored is exit 4, not 2 (bad
input, nothing run); when no recovery file can be written either, the run is marked failed with the reason and
the point's record is printed on stderr as one JSON line, never lost silently."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store

CliResult = tuple[int, str, str]
RUN = ("run", "-f", "fake", "-m", "resnet50", "--steps", "1", "--warmup", "0", "--repeats", "1")


def refusing_store(db: Path) -> None:
    """A store whose points table refuses every new row, as a full disk would (a real SQLite error)."""
    Store(db).create_run("dlbench run (earlier)")  # the store exists, with a run
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TRIGGER full BEFORE INSERT ON points BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    con.commit()
    con.close()


def newest_run(db: Path) -> tuple[str, str]:
    con = sqlite3.connect(db)
    status, reason = con.execute("SELECT status, reason FROM runs ORDER BY created DESC LIMIT 1").fetchone()
    con.close()
    return status, reason or ""


def test_a_point_the_store_refuses_is_exit_4_and_kept(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    refusing_store(db)
    code, _, err = cli(*RUN, "--store", str(db))
    assert code == 4, err
    assert "was kept in" in err.strip().splitlines()[-1]
    assert newest_run(db)[0] == "failed"
    assert len(Path(f"{db}.recovery.jsonl").read_text().splitlines()) == 1


def test_a_double_fault_fails_the_run_and_prints_the_point(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "recovery").write_text("a file where the recovery folder should be made")
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    refusing_store(db)
    Path(f"{db}.recovery.jsonl").mkdir()  # beside the store: not writable as a file either
    code, _, err = cli(*RUN, "--store", str(db))
    assert code == 4, err
    [record] = [line for line in err.splitlines() if line.startswith('{"')]  # the last resort
    message = err.strip().splitlines()[-1]
    assert json.loads(record)["row"]["framework"] == "fake"
    assert "could not be kept in a recovery file either" in message and "JSON line above" in message
    status, reason = newest_run(db)
    assert status == "failed" and "no recovery file could be written" in reason
