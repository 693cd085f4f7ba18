"""Making a SQLite store file: all at once, when its first row is about to be written.

The store is built (schema and version) in a hidden temporary file beside the target, then hard-linked to the
target name, which fails if another process got there first (then that store is used). So a reader never finds
an empty or half-made store, a command that fails or is killed before it stores anything leaves no store file,
and two writers creating the same store at once end with one. A temporary file left by a creator killed mid-way
holds no lock any more and is removed by the next creation.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path

from dlbench.store.migrations import upgrade
from dlbench.store.store_sql import sqlite_connect, sqlite_engine, writer_pragmas

CREATING = ".creating"
CREATION_WAIT_S = 10.0  # how long a reader waits for another process creating the store


def nearest_folder_problem(file: Path) -> str | None:
    """Why a store file could not be made at file (None when it could): its nearest existing ancestor must be a
    writable folder. Checked at open, so that bad input fails before anything runs, yet nothing is created."""
    folder = file.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        mode = os.stat(folder).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(mode):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    try:  # access() says yes to root everywhere, /proc included: make (and at once lose) a nameless file there
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"{folder} cannot hold a file: {exc.strerror or exc}"
    return None


def _live(tmp: Path) -> bool:
    """Whether a temporary store's creator still holds its lock."""
    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def wait_for_creator(file: Path, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait while another process is creating the store at file (a live temporary store beside it), up to
    timeout_s; True if one was seen (a reader then looks again: it never reads a store being created)."""
    seen, deadline = False, time.monotonic() + timeout_s
    while any(_live(t) for t in file.parent.glob(f".{file.name}.*{CREATING}")) and time.monotonic() < deadline:
        seen = True
        time.sleep(poll_s)
    return seen


def remove_stale(file: Path) -> None:
    """Remove temporary stores whose creator died (their lock is free)."""
    for tmp in file.parent.glob(f".{file.name}.*{CREATING}"):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its creator is alive
        for suffix in ("-wal", "-shm", "-journal", ""):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _locked_temporary(file: Path) -> tuple[int, str]:
    """A new temporary store beside file, already locked when it takes its `.creating` name: made under another
    name, locked, then renamed (the lock goes with the open file). Made and locked in two steps under the
    `.creating` name, another creator's remove_stale could take the still-free lock in between and delete it."""
    fd, made = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".new")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        tmp = made[: -len(".new")] + CREATING
        os.rename(made, tmp)
    except BaseException:
        os.close(fd)
        Path(made).unlink(missing_ok=True)
        raise
    return fd, tmp


def just_made(file: Path) -> bool:
    """Whether the file took its name within the last CREATION_WAIT_S (a link or a rename sets its ctime)."""
    try:
        return time.time() - os.stat(file).st_ctime < CREATION_WAIT_S
    except OSError:
        return False


def read_only_place(file: Path) -> bool:
    """Whether a reader cannot make the WAL's index beside file: a read-only file system or folder (then SQLite's
    immutable mode is the only way to read it, which ignores the WAL and every lock)."""
    try:
        return bool(os.statvfs(file.parent).f_flag & os.ST_RDONLY) or not os.access(file.parent, os.W_OK)
    except OSError:
        return True


def create_store_file(file: Path) -> bool:
    """Make a new store at file, schema and version included, in one step; False when another process made it
    first (its store is then the one to use). OSError / sqlite3.Error / SchemaError when it cannot be made."""
    file.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(file)
    fd, tmp = _locked_temporary(file)  # alive: remove_stale leaves it alone
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        raw = sqlite_connect(Path(tmp), "rwc")
        try:
            writer_pragmas(raw)
            engine = sqlite_engine(raw)
            with engine.connect() as conn:
                conn.info["write"] = True
                with conn.begin():
                    upgrade(conn)
            engine.dispose()
        finally:
            raw.close()  # the last connection: the WAL is checkpointed into the file and removed
        os.fsync(fd)
        try:
            os.link(tmp, file)
        except FileExistsError:
            return False
        except OSError as exc:  # a file system without hard links: rename, unless the store appeared meanwhile
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK) or file.exists():
                raise
            os.rename(tmp, file)
        return True
    finally:
        for suffix in ("-wal", "-shm", "-journal", ""):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        os.close(fd)
