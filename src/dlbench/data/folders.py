"""Write a data folder all at once: into a temporary sibling, renamed into place when complete."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlbench import __version__
from dlbench.data.layout import LAYOUT_VERSION, MANIFEST, DataLayoutError, read_manifest


def matching(out: Path, wanted: dict[str, object]) -> bool:
    """Whether out is a complete data folder whose manifest has every wanted key at the wanted value."""
    try:
        manifest = read_manifest(out)
    except (DataLayoutError, ValueError):
        return False
    return all(manifest.get(k) == v for k, v in wanted.items())


def check_out(out: Path, force: bool) -> None:
    """Refuse to replace a non-empty folder unless forced."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise DataLayoutError(f"{out} exists and is not empty: pass --force to replace it")


@contextmanager
def staging(out: Path, force: bool) -> Iterator[Path]:
    """A temporary folder beside out; on success it replaces out, on failure it is removed."""
    out = Path(out)
    check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def write_manifest(folder: Path, manifest: dict[str, object]) -> dict[str, object]:
    """Write the manifest last (it marks the folder complete); returns what was written."""
    full = {"layout_version": LAYOUT_VERSION, **manifest, "dlbench_version": __version__}
    (folder / MANIFEST).write_text(json.dumps(full, indent=1, sort_keys=True) + "\n")
    return full
