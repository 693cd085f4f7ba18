"""The recovery file: where a point goes when the store cannot take it (full disk, I/O error, a value the
database refuses). One JSON line per point, appended under a lock in one write and fsynced. Recovering is keyed
on the point's unique id, so reading a file twice adds nothing.

Every line is checked before it is used: a line that is not JSON (a torn last line, a hand edit), is nested too
deep to read, lacks a run id or holds a value of the wrong type is moved, under the same lock, to a quarantine
file beside it (`X.recovery.quarantine.jsonl`) with a one-line warning, so that it can never stop a write
command. The store is reached only through the transaction it hands in: this module does not know the Store.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dlbench.store.rows import POINT_COLUMNS, stored_point
from dlbench.store.store_sql import StoreError, points, runs
from dlbench.store.validate import INVALID

FORMAT_VERSION = 1
Transaction = Callable[..., AbstractContextManager[Connection]]  # Store.transaction(write=True)
_TEXT_COLUMNS = (
    "uid",
    "run_id",
    "spec_key",
    "framework",
    "model",
    "precision",
    "status",
    "spec_json",
    "ranks_json",
    "env_json",
    "identity_json",
    "descriptive_json",
    "extra_json",
)


@dataclass(frozen=True)
class Recovered:
    """What reading recovery files back did: points added (committed), points already there, points the store
    still refuses, and unreadable lines moved to a quarantine file."""

    added: int
    present: int
    failed: int
    files: tuple[Path, ...]
    errors: tuple[str, ...] = ()
    quarantined: int = 0


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


def quarantine_path(path: Path) -> Path:
    """Where the unreadable lines of a recovery file go: X.recovery.quarantine.jsonl beside it."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".quarantine.jsonl")


def _locked(path: Path, flags: int) -> int:
    """An fd on path holding its exclusive lock, reopened if a quarantine replaced the file meanwhile. Opened
    without blocking, so that a FIFO or device in its place is refused (OSError) instead of waiting forever."""
    while True:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path} is not a regular file (a FIFO, device or socket): move it away")
        os.set_blocking(fd, True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _append_line(path: Path, line: bytes) -> None:
    fd = _locked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path} ({written} of {len(line)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def append(paths: list[Path], record: dict[str, object]) -> Path:
    """Append one record as one line to the first path that can be written; returns it. OSError if none can."""
    line = (json.dumps({"format": FORMAT_VERSION, **record}, sort_keys=True) + "\n").encode()
    last: OSError | None = None
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _append_line(path, line)
            return path
        except OSError as exc:
            last = exc
    raise last or OSError("no recovery path")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def problem(rec: object) -> str | None:
    """Why a parsed line cannot be recovered (None when it can): its shape, its run id, each column's type, and
    the point rebuilt from it as a reader would."""
    if not isinstance(rec, dict) or not isinstance(rec.get("row"), dict):
        return "not a record with a row"
    row = rec["row"]
    missing = [c for c in POINT_COLUMNS if c not in row]
    if missing:
        return f"the row lacks {', '.join(missing[:3])}"
    for c in _TEXT_COLUMNS:
        if not isinstance(row[c], str) or (c in ("uid", "run_id") and not row[c]):
            return f"{c} is not {'a non-empty' if c in ('uid', 'run_id') else 'a'} string"
    for c in ("error", "metrics_json"):
        if row[c] is not None and not isinstance(row[c], str):
            return f"{c} is not a string"
    if isinstance(row["batch_size"], bool) or not isinstance(row["batch_size"], int):
        return "batch_size is not a whole number"
    if not (_number(row["started"]) and _number(row["finished"])):
        return "started or finished is not a finite number"
    try:
        back = stored_point({**row, "id": 0}).result
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        return f"the point cannot be read back ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
    return back.error if back.status == INVALID else None


def _parse(line: bytes) -> tuple[dict[str, object] | None, str]:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return None, "not JSON" if isinstance(exc, ValueError) else "nested too deep"
    why = problem(rec)
    return (rec, "") if why is None else (None, why)


def read(path: Path) -> tuple[list[dict[str, object]], list[tuple[int, str]]]:
    """The good records of a recovery file, and (line number, why) of each line that cannot be used. Under the
    file's lock, unusable lines are moved to its quarantine file (appended, fsynced, then the file rewritten
    without them) and a one-line warning says so."""
    fd = _locked(path, os.O_RDONLY)
    try:
        with open(fd, "rb", closefd=False) as fh:
            lines = fh.read().splitlines()
        records: list[dict[str, object]] = []
        good: list[bytes] = []
        bad: list[tuple[int, str, bytes]] = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            rec, why = _parse(line)
            if rec is None:
                bad.append((n, why, line))
            else:
                records.append(rec)
                good.append(line)
        if bad:
            _quarantine(path, good, bad)
        return records, [(n, why) for n, why, _ in bad]
    finally:
        os.close(fd)


def _quarantine(path: Path, good: list[bytes], bad: list[tuple[int, str, bytes]]) -> None:
    """Append the bad lines to the quarantine file, then replace the recovery file by its good lines; where
    that cannot be done the lines stay (and are skipped again next time). One warning line either way."""
    target = quarantine_path(path)
    first = f"line {bad[0][0]}: {bad[0][1]}"
    try:
        _append_line(target, b"".join(line + b"\n" for _, _, line in bad))
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"".join(line + b"\n" for line in good))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)  # appenders re-check the inode after taking the lock (_locked)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        print(
            f"dlbench: warning: {len(bad)} unreadable line(s) of {path} skipped ({first}); they could not be "
            f"moved to {target}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return
    print(f"dlbench: warning: {len(bad)} unreadable line(s) of {path} moved to {target} ({first})", file=sys.stderr)


def _lost_run(rec: dict[str, object], run_id: str) -> dict[str, object]:
    """The run row a recovered point belongs to, as recorded beside it (or a stand-in that says so)."""
    run = rec.get("run")
    if (
        isinstance(run, dict)
        and run.get("id") == run_id
        and _number(run.get("created"))
        and all(isinstance(run.get(k), str) for k in ("command", "status", "kind", "meta_json"))
    ):
        return {c.name: run.get(c.name) for c in runs.c}
    when = rec.get("time")
    return {
        "id": run_id,
        "created": float(when) if _number(when) else time.time(),  # type: ignore[arg-type]
        "command": "(recovered)",
        "status": "failed",
        "kind": "run",
        "meta_json": "{}",
        "reason": "recovered from a recovery file",
    }


def read_back(paths: list[Path], transaction: Transaction) -> Recovered:
    """Insert every recovery-file point the store lacks (keyed on its UUID), one transaction per point; a point
    counts as added only once its transaction has committed."""
    added = present = failed = quarantined = 0
    files, errors = [], []
    for path in paths:
        if not path.exists():
            continue
        files.append(path)
        try:
            records, bad = read(path)
        except OSError as exc:
            raise StoreError(f"cannot read the recovery file {path}: {exc}") from None
        quarantined += len(bad)
        for rec in records:
            row: dict[str, object] = dict(rec["row"])  # type: ignore[call-overload]
            try:
                with transaction(write=True) as c:
                    if c.execute(sa.select(points.c.id).where(points.c.uid == row["uid"])).first():
                        present += 1
                        continue
                    if not c.execute(sa.select(runs.c.id).where(runs.c.id == row["run_id"])).first():
                        c.execute(runs.insert().values(**_lost_run(rec, str(row["run_id"]))))
                    c.execute(points.insert().values(**{c.name: row.get(c.name) for c in points.c if c.name != "id"}))
            except StoreError as exc:
                failed += 1
                errors.append(str(exc))
                continue
            added += 1
    return Recovered(added, present, failed, tuple(files), tuple(errors), quarantined)
