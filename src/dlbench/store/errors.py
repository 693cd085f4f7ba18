"""The store's errors, importable without the database layer (the CLI catches them before any store opens)."""

from __future__ import annotations


class StoreError(Exception):
    """The store cannot be opened, written or understood; the message is one line for the user."""


class PointNotStored(StoreError):
    """A point ran but the store could not take it (it went to a recovery file, or to stderr): exit code 4."""


EXIT_NOT_STORED = 4  # `run` and `sweep`: points ran, but one could not be stored (README, Run it)

__all__ = ["EXIT_NOT_STORED", "PointNotStored", "StoreError"]
