"""The recovery file (#25): every line checked; a bad one (no run id, nested too deep, a wrong type, not JSON) is
quarantined beside it with one warning line and never crashes a write command; `--recover` counts only points
whose transaction committed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import Connection

from dlbench.store.rows import point_row
from dlbench.store.store import Store, StoreError
from tests.support.stores import result

CliResult = tuple[int, str, str]


def good_line(run_id: str = "20260101-000000-00000000", batch: int = 2) -> str:
    row = point_row(run_id, str(uuid.uuid4()), result(batch=batch))
    return json.dumps({"format": 1, "row": row, "run": None, "time": 1.0})


def bad_lines() -> list[str]:
    no_run = json.loads(good_line())
    del no_run["row"]["run_id"]
    wrong_type = json.loads(good_line())
    wrong_type["row"]["batch_size"] = "8"
    bad_metrics = json.loads(good_line())
    bad_metrics["row"]["ranks_json"] = '[{"rank": "zero"}]'
    return [
        json.dumps(no_run),
        "[" * 100_000 + "]" * 100_000,
        json.dumps(wrong_type),
        json.dumps(bad_metrics),
        '{"format": 1, "row": {"uid": "torn',
    ]


def test_bad_lines_are_quarantined_and_never_stop_a_write_command(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    recovery = Path(f"{db}.recovery.jsonl")
    recovery.write_text("\n".join([good_line(), *bad_lines()]) + "\n")
    code, out, err = cli(
        "run", "-f", "fake", "-m", "resnet50", "--steps", "1", "--warmup", "0", "--repeats", "1", "--store", str(db)
    )
    assert code == 0, err
    assert "Traceback" not in err
    [warning] = [line for line in err.splitlines() if "unreadable" in line]
    assert "5 unreadable line(s)" in warning and "quarantine" in warning
    quarantine = tmp_path / "s.db.recovery.quarantine.jsonl"
    assert len(quarantine.read_text().splitlines()) == 5
    assert len(recovery.read_text().splitlines()) == 1  # only the good line stays
    assert len(Store(db, readonly=True).points()) == 2  # the recovered point and the one just run
    code, out, err = cli("results", "--recover", "--store", str(db))
    assert code == 0 and "recovered 0 point(s)" in out and "1 were already there" in out and not err


def test_recover_counts_only_what_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    store = Store(db)
    Path(f"{db}.recovery.jsonl").write_text(good_line() + "\n")
    real = store.transaction

    @contextmanager
    def commit_fails(write: bool = False) -> Iterator[Connection]:
        """The insert runs, then the commit fails, as on a full disk (SQLite writes the WAL at COMMIT)."""
        try:
            with real(write=write) as c:
                yield c
                if write:
                    raise OSError("database or disk is full")  # rolls the transaction back
        except OSError as exc:
            raise StoreError(f"cannot write to the store at {db}: {exc}") from None

    monkeypatch.setattr(store, "transaction", commit_fails)
    got = store.recover()
    assert (got.added, got.present, got.failed) == (0, 0, 1)
    monkeypatch.setattr(store, "transaction", real)
    assert store.points() == []
    assert store.recover().added == 1
