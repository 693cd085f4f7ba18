"""dlbench: measure how fast deep-learning frameworks train the standard models, one protocol for all."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _version() -> str:
    # ~50 ms: read when asked, not at every import
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dlbench")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    """`dlbench.__version__`, read from the installed metadata on first use (PEP 562)."""
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'dlbench' has no attribute {name!r}")


__all__ = ["__version__"]
