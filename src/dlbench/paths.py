"""Where dlbench keeps its files on this host: the dlbench home and the caches under it."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """$DLBENCH_HOME, else ~/.dlbench: per-framework environments, logs and caches (read on every call)."""
    raw = os.environ.get("DLBENCH_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".dlbench"


def cache_dir(name: str) -> Path:
    """A persistent cache folder under the dlbench home: cache/<name> (e.g. JAX's compilation cache)."""
    return home() / "cache" / name
