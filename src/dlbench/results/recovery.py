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
from pathlib import Path

FORMAT_VERSION = 1


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
