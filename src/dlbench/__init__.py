"""dlbench: measure how fast deep-learning frameworks train the standard models, one protocol for all."""

from __future__ import annotations

import functools
import re
from pathlib import Path

# Where a source tree copied without its .git (an offline GPU node) keeps the commit it was copied at: written by
# the node's command (benchmarks/gpu/README.md) from benchmarks/gpu/wheels.sh's stamp; ignored by git. Line 1: the
# full commit; line 2: `git describe --always --dirty --tags`.
COMMIT_FILE = Path(__file__).resolve().parent / "COMMIT"


@functools.lru_cache(maxsize=1)
def _version() -> str:
    # ~50 ms: read when asked, not at every import
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dlbench")
    except PackageNotFoundError:  # a source tree on PYTHONPATH, not installed: its pyproject.toml's version
        return _source_version()


def _source_version() -> str:
    """The version pyproject.toml above this package names, or 0.0.0+unknown where there is none."""
    meta = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        text = meta.read_text(encoding="utf-8")
    except OSError:
        return "0.0.0+unknown"
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    found = re.search(r'^name\s*=\s*"dlbench"\s*$', project.group(1), re.MULTILINE) if project else None
    pinned = re.search(r'^version\s*=\s*"([^"]+)"\s*$', project.group(1), re.MULTILINE) if found and project else None
    return pinned.group(1) if pinned else "0.0.0+unknown"


def stamped_commit(describe: bool = False) -> str:
    """The commit COMMIT_FILE records (the full commit, or with `describe` its `git describe`); '' without it."""
    try:
        lines = COMMIT_FILE.read_text(encoding="ascii").split("\n")
    except (OSError, UnicodeDecodeError):
        return ""
    value = (lines[1] if describe and len(lines) > 1 else lines[0]).strip()
    return value if re.fullmatch(r"[\w.+/-]{1,120}", value) else ""


def __getattr__(name: str) -> str:
    """`dlbench.__version__`, read from the installed metadata on first use (PEP 562)."""
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'dlbench' has no attribute {name!r}")


__all__ = ["COMMIT_FILE", "__version__", "stamped_commit"]
