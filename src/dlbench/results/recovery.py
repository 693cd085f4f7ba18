"""The recovery file: where a point goes when the store cannot take it (full disk, I/O error, a value the
database refuses). One JSON line per point, appended under a lock in one write and fsynced, so that a crash
leaves at most a torn last line, which readers skip. Nothing here rewrites the file: recovering is keyed on
the point's unique id, so reading a file twice adds nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from dlbench.results.store_sql import StoreError, points, runs

if TYPE_CHECKING:
    from dlbench.results.store import Store

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Recovered:
    """What reading recovery files back did: points added, points already there, lines that still fail."""

    added: int
    present: int
    failed: int
    files: tuple[Path, ...]
    errors: tuple[str, ...] = ()


def dlbench_home() -> Path:
    """$DLBENCH_HOME, else ~/.dlbench."""
    raw = os.environ.get("DLBENCH_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".dlbench"


def recovery_paths(store_file: Path | None, display: str) -> list[Path]:
    """Where a store's recovery lines go, in order: beside a SQLite store, then (where that cannot be written,
    and for a server store) under $DLBENCH_HOME/recovery, named after the store."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", (store_file.name if store_file else display.split("@")[-1]))[:60]
    ident = str(store_file.absolute()) if store_file else display
    home = dlbench_home() / "recovery" / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:10]}.recovery.jsonl"
    return [Path(f"{store_file}.recovery.jsonl"), home] if store_file else [home]


def append(paths: list[Path], record: dict[str, object]) -> Path:
    """Append one record as one line to the first path that can be written; returns it. OSError if none can."""
    line = (json.dumps({"format": FORMAT_VERSION, **record}, sort_keys=True) + "\n").encode()
    last: OSError | None = None
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"short write to {path} ({written} of {len(line)} bytes)")
                os.fsync(fd)
            finally:
                os.close(fd)
            return path
        except OSError as exc:
            last = exc
    raise last or OSError("no recovery path")


def read(path: Path) -> tuple[list[dict[str, object]], int]:
    """The records of a recovery file, and how many lines could not be read (a torn last line, say)."""
    records: list[dict[str, object]] = []
    bad = 0
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("row"), dict):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def _lost_run(rec: dict[str, object], run_id: str) -> dict[str, object]:
    """The run row a recovered point belongs to, as recorded beside it (or a stand-in that says so)."""
    run = rec.get("run")
    if isinstance(run, dict):
        return {k: run.get(k) for k in runs.c.keys()}
    return {"id": run_id, "created": float(rec.get("time") or time.time()),  # type: ignore[arg-type]
            "command": "(recovered)", "status": "failed", "kind": "run", "meta_json": "{}",
            "reason": "recovered from a recovery file"}


def read_back(store: Store) -> Recovered:
    """Insert every recovery-file point the store lacks (keyed on its UUID), one transaction per point."""

    added = present = failed = 0
    files, errors = [], []
    for path in store.recovery_paths:
        if not path.exists():
            continue
        files.append(path)
        try:
            records, bad = read(path)
        except OSError as exc:
            raise StoreError(f"cannot read the recovery file {path}: {exc}") from None
        failed += bad
        for rec in records:
            row = dict(rec["row"])  # type: ignore[call-overload]
            try:
                with store.transaction(write=True) as c:
                    if c.execute(sa.select(points.c.id).where(points.c.uid == row["uid"])).first():
                        present += 1
                        continue
                    if not c.execute(sa.select(runs.c.id).where(runs.c.id == row["run_id"])).first():
                        c.execute(runs.insert().values(**_lost_run(rec, str(row["run_id"]))))
                    c.execute(points.insert().values(**{k: row.get(k) for k in points.c.keys() if k != "id"}))
                    added += 1
            except StoreError as exc:
                failed += 1
                errors.append(str(exc))
    return Recovered(added, present, failed, tuple(files), tuple(errors))
