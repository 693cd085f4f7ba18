"""Schema versions of the store and forward migrations, through Alembic, for SQLite and PostgreSQL alike.

The revisions live in store/alembic/versions (v1, v2, v3 ...). A store's version is its Alembic revision;
stores made before Alembic kept it in a `schema_meta` table only: they are stamped at that revision first,
then upgraded. Each revision also writes `schema_meta`, so that an older dlbench refuses a newer store.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from alembic.config import Config

STORE_SCHEMA_VERSION = 4  # the newest revision, v4; see store/alembic/versions
SCRIPTS = Path(__file__).with_name("alembic")
_REVISION = re.compile(r"^v(\d+)$")
# PostgreSQL: one migrating process at a time, whatever the database (pg_advisory_xact_lock's key).
_MIGRATION_LOCK = 0x646C62656E6368  # "dlbench"


class SchemaError(Exception):
    """The database is not a dlbench store, or its version cannot be read; the message is one line."""


def _config(conn: Connection) -> Config:
    # Alembic is imported only when a store is made or migrated
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = conn
    return cfg


def stored_version(conn: Connection) -> int:
    """The version a store is at: 0 for an empty database; SchemaError for a database that is not a store or
    whose version is unreadable."""
    tables = set(sa.inspect(conn).get_table_names())
    if "alembic_version" in tables:
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        revs = [str(r[0]) for r in rows]
        m = _REVISION.match(revs[0]) if len(revs) == 1 else None
        if m is None:
            raise SchemaError(f"unreadable schema version {revs!r} (alembic_version)")
        return int(m.group(1))
    if "schema_meta" in tables:
        value = conn.exec_driver_sql("SELECT value FROM schema_meta WHERE key='schema_version'").scalar()
        try:
            return int(str(value)) if value is not None else -1
        except ValueError:
            raise SchemaError(f"unreadable schema version {value!r} (schema_meta)") from None
    if not tables:
        return 0
    raise SchemaError("not a dlbench store (it has tables, but neither runs nor a schema version)")


def check_version(version: int) -> None:
    """Refuse a version this dlbench cannot read."""
    if version > STORE_SCHEMA_VERSION:
        raise SchemaError(f"schema {version}, newer than this dlbench ({STORE_SCHEMA_VERSION}): upgrade dlbench")
    if version < 0:
        raise SchemaError("unreadable schema version (schema_meta has none)")


def upgrade(conn: Connection, to: int = STORE_SCHEMA_VERSION) -> int:
    """Bring the store on conn (inside the caller's transaction) to version `to`; returns the version before."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
    before = stored_version(conn)
    check_version(before)
    if before >= to:
        return before
    from alembic import command

    cfg = _config(conn)
    tables = set(sa.inspect(conn).get_table_names())
    if before > 0 and "alembic_version" not in tables:
        command.stamp(cfg, f"v{before}")  # a store from before Alembic: its schema_meta says where it is
    command.upgrade(cfg, f"v{to}")
    return before
