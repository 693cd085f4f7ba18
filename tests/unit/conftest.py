"""Fixtures of the unit tests' own: the store fixtures (SQLite and a real PostgreSQL server, store_fixtures.py)."""

from __future__ import annotations

from store_fixtures import pg_server, pg_url, store_url

__all__ = ["pg_server", "pg_url", "store_url"]
