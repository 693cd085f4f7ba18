"""Write a data folder all at once: into a temporary sibling, renamed into place when complete."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlbench import __version__
from dlbench.data.layout import LAYOUT_VERSION, MANIFEST, DataLayoutError, read_manifest

LOCK = ".dlbench-writing"  # held (flock) inside a staging folder by the process writing it


def matching(out: Path, wanted: dict[str, object]) -> bool:
    """Whether out is a complete data folder whose manifest has every wanted key at the wanted value."""
    try:
        manifest = read_manifest(out)
    except (DataLayoutError, ValueError):
        return False
    return all(manifest.get(k) == v for k, v in wanted.items())


def check_out(out: Path, force: bool) -> None:
    """Refuse to replace what dlbench did not make: anything but a folder (a file, a link, a FIFO), always; a
    non-empty folder unless forced, and even forced, one without a data folder's manifest (the user's own)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise DataLayoutError(f"{out} exists and is not a folder: give another --out")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise DataLayoutError(f"{out} exists and is not empty: pass --force to replace it")
    if not (out / MANIFEST).is_file():
        raise DataLayoutError(
            f"{out} holds files dlbench did not make (no {MANIFEST}): --force replaces only a data folder "
            "`dlbench data` made; give another --out"
        )


STAGING = ".staging"  # the suffix of a data folder being written


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders beside out whose writer died (kill -9 skips every cleanup): their lock file
    (LOCK, inside) is no longer held. Returns what was removed."""
    removed = []
    for folder in out.parent.glob(f".{out.name}-*{STAGING}"):
        try:
            fd = os.open(folder / LOCK, os.O_RDONLY)
        except OSError:
            continue  # not made by staging(), or just being made: not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its writer is alive
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@contextmanager
def staging(out: Path, force: bool) -> Iterator[Path]:
    """A temporary folder beside out; on success it replaces out, on failure (Ctrl-C, SIGTERM included) it is
    removed, and one left by a writer killed outright is removed by the next (remove_stale_staging)."""
    out = Path(out)
    check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", suffix=STAGING, dir=out.parent))
    lock = os.open(tmp / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while this process writes: alive
        yield tmp
        (tmp / LOCK).unlink()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)
    check_out(out, force)  # again, just before the old folder goes: nothing of the user's swapped in since
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def write_manifest(folder: Path, manifest: dict[str, object]) -> dict[str, object]:
    """Write the manifest last (it marks the folder complete); returns what was written."""
    full = {"layout_version": LAYOUT_VERSION, **manifest, "dlbench_version": __version__}
    (folder / MANIFEST).write_text(json.dumps(full, indent=1, sort_keys=True) + "\n")
    return full
