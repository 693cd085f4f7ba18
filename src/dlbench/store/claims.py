"""One controller per run: who controls a run, whether it is still alive, and an exclusive claim on the run.

A claim is an OS file lock (fcntl.flock) on a lock file beside a SQLite store, and a session advisory lock
(pg_try_advisory_lock on a hash of the run id) on PostgreSQL. Both vanish with the process that holds them,
kill -9 included, so a dead controller never blocks a resume.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine


class ClaimTaken(Exception):
    """Another process holds the claim; holder says who, where known ("pid 123 on host")."""

    def __init__(self, holder: str = "") -> None:
        super().__init__(holder)
        self.holder = holder


def controller() -> tuple[str, int, float]:
    """This process as a run's controller: host name, pid, and the pid's start time (survives pid reuse)."""
    return socket.gethostname(), os.getpid(), psutil.Process().create_time()


def controller_gone(host: str | None, pid: int | None, started: float | None) -> bool:
    """True when a controller on this host is dead (or its pid now belongs to a younger process). A controller
    on another host, or one not recorded, cannot be judged from here: False."""
    if host != socket.gethostname() or pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return started is not None and abs(proc.create_time() - started) > 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # e.g. access denied: the process exists
        return False


def advisory_key(run_id: str) -> int:
    """A signed 64-bit key for pg_advisory_lock, from the run id."""
    return int.from_bytes(hashlib.blake2b(run_id.encode(), digest_size=8).digest(), "big", signed=True)


def lock_file(store_file: Path, run_id: str) -> Path:
    """The lock file of a run beside a SQLite store."""
    return Path(f"{store_file}.claims") / (re.sub(r"[^A-Za-z0-9_.-]", "_", run_id) + ".lock")


@contextmanager
def file_claim(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on path; ClaimTaken (with the holder's pid) when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            raise ClaimTaken(holder) from None
        host, pid, _ = controller()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {pid} on {host}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextmanager
def advisory_claim(engine: Engine, run_id: str) -> Iterator[None]:
    """Hold a PostgreSQL session advisory lock on the run on a connection of its own; ClaimTaken when taken."""
    key = advisory_key(run_id)
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        conn.commit()
        if not got:
            raise ClaimTaken()
        try:
            yield
        finally:
            try:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
            except sa.exc.SQLAlchemyError:  # the connection is gone: so is the lock
                pass
