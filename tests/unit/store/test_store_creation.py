"""A store file is made only when its first row is written, all at once (#25): bad input, a failed command or an
early kill leaves no file; a reader racing the creation sees no store or a whole one, never "not a dlbench store"."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store, StoreError
from dlbench.store.store_file import _locked_temporary, remove_stale

CliResult = tuple[int, str, str]


def test_a_writer_that_writes_nothing_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "a" / "b" / "s.db")
    assert store.runs() == [] and store.points() == [] and store.done_keys("x") == set()
    with pytest.raises(StoreError, match="no run"):
        store.get_run("nope")
    store.close()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot open the store"):  # an impossible place still fails at open
        Store(tmp_path / "file" / "s.db")


def test_resume_without_a_run_id_writes_nothing(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("sweep", "--resume", "--store", "X")
    assert code == 2 and "--resume takes the id" in err
    code, _, err = cli("sweep", "--resume", "nosuchrun", "--store", "new.db")
    assert code == 2 and "no run 'nosuchrun'" in err
    assert list(tmp_path.iterdir()) == []


def test_readers_racing_the_creation_never_see_a_half_made_store(tmp_path: Path) -> None:
    for i in range(3):
        path = tmp_path / f"s{i}.db"
        made = threading.Event()

        def create(at: Path = path, done: threading.Event = made) -> None:
            Store(at).create_run("x")
            done.set()

        seen: set[str] = set()
        writer = threading.Thread(target=create)
        writer.start()
        while not made.is_set():
            try:
                Store(path, readonly=True).close()
                seen.add("store")
            except StoreError as exc:
                seen.add("no store" if "no store at" in str(exc) else str(exc))
        writer.join()
        assert seen <= {"no store", "store"}, seen
        assert len(Store(path, readonly=True).runs()) == 1


def test_a_creation_killed_midway_leaves_no_store_and_is_cleaned_up(tmp_path: Path) -> None:
    stale = tmp_path / ".s.db.abc123.creating"
    stale.write_bytes(b"half a database")  # its creator died: nobody holds its lock
    alive = tmp_path / ".s.db.def456.creating"
    alive.write_bytes(b"")
    fd = os.open(alive, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a creator still at work
    try:
        with pytest.raises(StoreError, match="being created by another process"):  # it waited, then says so (#31)
            Store(tmp_path / "s.db", readonly=True)
        Store(tmp_path / "s.db").create_run("x")
        assert not stale.exists() and alive.exists()
    finally:
        os.close(fd)
    assert len(Store(tmp_path / "s.db", readonly=True).runs()) == 1


def test_a_reader_waits_for_a_store_just_made_and_still_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#41: with 4 runs creating one store at once, a reader read "not a dlbench store (an empty database)" once
    in 25. A just-made file that holds no schema yet is waited for, as an absent one being created is."""
    path = tmp_path / "s.db"
    sqlite3.connect(path).execute("PRAGMA user_version=0").connection.close()  # an empty SQLite database

    def fill() -> None:  # a writer that makes the schema in it, half a second later
        time.sleep(0.5)
        Store(path).create_run("x")

    filler = threading.Thread(target=fill)
    filler.start()
    start = time.monotonic()
    runs = Store(path, readonly=True).runs()  # no "empty database" error: it waits for the schema
    waited = time.monotonic() - start
    filler.join()
    # The schema and the run are two commits: a reader that sees the schema may come before the run (CI saw it)
    assert 0.4 < waited < 10 and [r.id for r in runs] in ([], [r.id for r in Store(path).runs()])
    assert len(Store(path, readonly=True).runs()) == 1
    old = tmp_path / "old.db"
    sqlite3.connect(old).execute("PRAGMA user_version=0").connection.close()
    monkeypatch.setattr("dlbench.store.store.just_made", lambda file: False)  # an empty database made long ago
    start = time.monotonic()
    with pytest.raises(StoreError, match=r"not a dlbench store \(an empty database\)"):
        Store(old, readonly=True)
    assert time.monotonic() - start < 2


def test_a_temporary_store_is_locked_before_it_takes_its_creating_name(tmp_path: Path) -> None:
    """Made and locked in two steps under its `.creating` name, another creator's remove_stale could take the
    still-free lock in between and delete a live creation."""
    fd, tmp = _locked_temporary(tmp_path / "s.db")
    try:
        assert tmp.endswith(".creating") and not list(tmp_path.glob("*.new"))
        other = os.open(tmp, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
        remove_stale(tmp_path / "s.db")
        assert Path(tmp).exists()
    finally:
        os.close(fd)
