"""Fixtures of the unit tests' own: the store fixtures (SQLite and a real PostgreSQL server, store_fixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_fixtures import pg_server, pg_url, store_url


@pytest.fixture(autouse=True)
def _forget_gpus() -> Iterator[None]:
    """dlbench.machine.env.gpus() is cached per process: a test that faked NVML must not leave its GPUs to the next."""
    yield
    from dlbench.machine import env

    env.gpus.cache_clear()

__all__ = ["pg_server", "pg_url", "store_url"]
