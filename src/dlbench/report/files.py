"""Writing report files atomically through unpredictable temporary names: nothing planted beside the output
(a symlink named X.part, say) is ever followed, and a reader sees the old file or the new one, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write text to path: a new temporary file (O_EXCL, random name) in the same folder, then rename over."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a report is read like any other output
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def temp_folder_beside(path: Path) -> Path:
    """A new empty folder with a random name beside path (mkdtemp: created, never an existing one)."""
    folder = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    folder.chmod(0o777 & ~umask())  # mkdtemp makes 0700; the report's chart folder is read like the report
    return folder


def umask() -> int:
    """The process's umask (read by setting it and putting it back: os has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
