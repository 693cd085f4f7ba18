"""Writing report files atomically through unpredictable temporary names: nothing planted beside the output
(a symlink named X.part, say) is ever followed, and a reader sees the old file or the new one, never half.

An output path is a new path or a regular file: a directory, a device (/dev/full, /dev/null), a FIFO, a socket
or a symbolic link is refused in one line before anything is written, so a typo in `-o` never replaces what is
there; so is a store (a SQLite database, or its -wal, -shm or -journal file), any path in the kernel's pseudo
file systems (/proc, /sys, /dev), and a file the user could not write in place. Every output of dlbench that
names a file (`report -o`, `reproduce --env-file`) goes through `check_output` and `write_atomic`. A folder of
charts is replaced only when dlbench made it: it carries a marker file listing what dlbench wrote into it, and a
folder without that marker, or holding anything else, is refused, never deleted (`dlbench data --out` keeps the
same rule with its manifest: data/folders.py).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

MARKER = ".dlbench-report-files"  # inside a chart folder dlbench made: JSON, the files it wrote there
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database (a store)
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")  # a SQLite write-ahead log's first 4 bytes
SIDE_FILES = ("-wal", "-shm", "-journal")  # a SQLite database's companions, named after it
PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))  # the kernel's files: never an output


class OutputError(ValueError):
    """An output path dlbench will not write: the message is one line naming it and what is there."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _is_store(path: Path) -> bool:
    """Whether path is a SQLite database or one of its companion files (a store dlbench or someone keeps)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if head.startswith(SQLITE_MAGIC) or head[:4] in WAL_MAGIC:
        return True
    for suffix in SIDE_FILES:
        if path.name.endswith(suffix) and _is_store(path.with_name(path.name[: -len(suffix)])):
            return True
    return False


def _pseudo(path: Path) -> Path | None:
    """The kernel pseudo file system path lies in (/proc, /sys, /dev), after its folder's links are followed."""
    where = Path(os.path.realpath(path.parent)) / path.name
    return next((root for root in PSEUDO if where == root or root in where.parents), None)


def check_output(path: Path) -> None:
    """OutputError unless path is new or a regular file the user may write, and not a store nor the kernel's (a
    symbolic link is refused, never followed)."""
    if not str(path) or str(path).endswith(os.sep):
        raise OutputError(f"the output path {str(path)!r} names no file")
    try:
        mode: int | None = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"cannot use {path} as output: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(
            f"{path} is {_kind(mode)}: dlbench writes only a new file or replaces a regular file; give another path"
        )
    root = _pseudo(path)
    if root is not None:
        raise OutputError(f"{path} is in {root}, the kernel's own files: dlbench writes no output there")
    if mode is None:
        return
    if _is_store(path):
        raise OutputError(f"{path} is a SQLite database (a store): dlbench never writes over one; give another path")
    if not os.access(path, os.W_OK):  # the rename would go around the file's own permissions (a shared folder)
        raise OutputError(
            f"{path} is not writable by you: dlbench replaces only a file you could write in place; give another path"
        )


def write_atomic(path: Path, text: str) -> None:
    """Write text to path: a new temporary file (O_EXCL, random name) in the same folder, then rename over.
    The file's mode is what any new file gets (0666 less the umask)."""
    check_output(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a report is read like any other output
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        check_output(path)  # once more just before the rename: nothing swapped in since
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def temp_folder_beside(path: Path) -> Path:
    """A new empty folder with a random name beside path (mkdtemp: created, never an existing one), locked by this
    process until it exits, so that the next writer can tell one left by a writer killed outright (kill -9 skips
    every cleanup) from one still being written (remove_stale_temp_folders)."""
    remove_stale_temp_folders(path)
    folder = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    folder.chmod(0o777 & ~umask())  # mkdtemp makes 0700; the report's chart folder is read like the report
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel when this process ends, however it ends
    _HELD.append(fd)
    return folder


_HELD: list[int] = []  # the temporary folders' locks this process holds (a few per report, until it exits)
STALE_AFTER_S = 60.0  # a folder younger than this may be between mkdtemp and its lock: never judged


def remove_stale_temp_folders(path: Path) -> list[Path]:
    """Remove the temporary folders beside path that a killed writer left: older than a minute and locked by no
    live process. Returns what was removed."""
    removed = []
    for folder in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or time.time() - st.st_mtime < STALE_AFTER_S:
                continue
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its writer is alive
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def umask() -> int:
    """The process's umask (read by setting it and putting it back: os has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_chart_folder(folder: Path) -> None:
    """OutputError unless folder is absent, or a folder dlbench made (its marker lists everything in it)."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{folder} is {_kind(mode)}, not a chart folder dlbench made: move it or give another -o")
    try:
        listed = set(json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise OutputError(
            f"{folder} exists and dlbench did not make it (no {MARKER} in it): move it or give another -o"
        ) from None
    extra = sorted(p.name for p in folder.iterdir() if p.name not in listed | {MARKER})
    if extra or any(
        not (folder / name).is_file() or (folder / name).is_symlink() for name in listed if (folder / name).exists()
    ):
        raise OutputError(
            f"{folder} holds files dlbench did not write ({', '.join(extra[:3]) or 'a changed file'}): "
            "move them or give another -o"
        )


def chart_folder(path: Path) -> Path:
    """Where the charts of the Markdown report at path go: <stem>_files/ beside it."""
    return path.with_name(f"{path.stem}_files")


def check_markdown_output(path: Path) -> None:
    """OutputError unless path and its chart folder can be written without replacing what is not dlbench's."""
    check_output(path)
    check_chart_folder(chart_folder(path))


def mark_chart_folder(folder: Path, names: list[str]) -> None:
    """Write the marker that says dlbench made this folder and what it put there."""
    (folder / MARKER).write_text(
        json.dumps({"made_by": "dlbench report", "files": sorted(names)}) + "\n", encoding="utf-8"
    )


def replace_chart_folder(new: Path, folder: Path) -> None:
    """Put the finished folder `new` at `folder`: an old one is removed only if dlbench made it (checked again)."""
    check_chart_folder(folder)
    if not folder.exists():
        os.replace(new, folder)
        return
    old = temp_folder_beside(folder)
    os.replace(folder, old / "old")  # aside, then the new one in; a failure puts the old one back
    try:
        os.replace(new, folder)
    except BaseException:
        os.replace(old / "old", folder)
        raise
    shutil.rmtree(old)
