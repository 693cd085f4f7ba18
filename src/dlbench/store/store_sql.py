"""Where a store lives and how it is reached: a SQLite file or a PostgreSQL URL, through SQLAlchemy Core.

The tables below are the current schema (the Alembic revisions in store/alembic/versions build it); every
read and write of the store goes through them, for both dialects. Passwords are never shown: every message
and every display string passes through `mask`, which is `dlbench.redact.redact`, the one redaction function.
"""

from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.pool import NullPool, StaticPool

from dlbench.redact import is_libpq_string
from dlbench.redact import redact as mask
from dlbench.store.errors import StoreError

DEFAULT_STORE = Path("dlbench-results") / "results.db"
SCHEMES = {"postgresql": "postgresql", "postgres": "postgresql", "postgresql+psycopg": "postgresql", "sqlite": "sqlite"}
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CONNECT_TIMEOUT_S = 10
BUSY_TIMEOUT_S = 30.0

metadata = sa.MetaData()
runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False, server_default="run"),
    sa.Column("meta_json", sa.Text, nullable=False, server_default="{}"),
    sa.Column("host", sa.Text),  # the controller: host, pid and the pid's start time (to survive pid reuse)
    sa.Column("pid", sa.BigInteger),
    sa.Column("pid_started", sa.Float),
    sa.Column("reason", sa.Text),  # one line, for a run that failed
)
points = sa.Table(
    "points",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uid", sa.Text, unique=True),  # globally unique: copies between stores are keyed on it
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("spec_key", sa.Text, nullable=False),
    sa.Column("framework", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("batch_size", sa.BigInteger, nullable=False),
    sa.Column("precision", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("spec_json", sa.Text, nullable=False),
    sa.Column("ranks_json", sa.Text, nullable=False),
    sa.Column("metrics_json", sa.Text),
    sa.Column("env_json", sa.Text, nullable=False),
    sa.Column("identity_json", sa.Text, nullable=False, server_default="{}"),
    sa.Column("descriptive_json", sa.Text, nullable=False, server_default="{}"),
    sa.Column("extra_json", sa.Text, nullable=False, server_default="{}"),
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("finished", sa.Float, nullable=False),
    sqlite_autoincrement=True,
)


def one_line(exc: BaseException) -> str:
    """The first line of an error (the driver's own, where SQLAlchemy wrapped it), passwords masked."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).strip().splitlines() if ln.strip()]
    return mask(lines[0] if lines else type(orig).__name__)


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    """--store, else $DLBENCH_STORE, else ./dlbench-results/results.db; a folder gets results.db inside.

    For a PostgreSQL store this is the local default file: its folder is where local files go (sweep data).
    """
    raw = _raw_store(path)
    if raw and _URL.match(raw):
        try:
            target = parse_target(raw)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        return target.file if target.file is not None else DEFAULT_STORE
    if raw and raw.endswith(("/", os.sep)):
        raise StoreError(f"{raw} names a folder: name the store's file, e.g. {Path(raw) / 'results.db'}")
    return regular_store_file(Path(raw) if raw else DEFAULT_STORE)


def regular_store_file(p: Path) -> Path:
    """The path itself where it is a store file or absent; a folder (docs/refusals.md: a store is named by its file,
    as before) or a special file (a FIFO would block every reader) is refused in one line."""
    if p.is_dir():
        raise StoreError(f"{p} is a folder: name the store's file, e.g. {p / 'results.db'}")
    if p.exists() and not p.is_file():
        raise StoreError(f"{p} is not a regular file (a FIFO, device or socket): give a store file")
    return p


def _raw_store(path: str | os.PathLike[str] | None) -> str | None:
    """The store as given (--store, else $DLBENCH_STORE; an empty variable is unset). An empty --store and a libpq
    keyword string (host=... password=...) are refused: neither names a file, and the second holds secrets."""
    if path is not None:
        raw: str | None = os.fspath(path)
        if not str(raw).strip():
            raise StoreError(
                "the store path is empty: give a file path or postgresql://user@host/db, or leave the "
                "option out for the default store"
            )
    else:
        raw = os.environ.get("DLBENCH_STORE") or None
    if raw is not None and is_libpq_string(raw):
        raise StoreError(
            f"{mask(raw)!r} is a libpq keyword string, not a store: give the store as "
            "postgresql://user@host/db (the password from ~/.pgpass or PGPASSWORD)"
        )
    return raw


@dataclass(frozen=True)
class Target:
    """A store's location: its dialect, its SQLAlchemy URL, what to show the user, and the file for SQLite."""

    dialect: str
    url: URL | None
    display: str
    file: Path | None = None


def parse_target(path_or_url: str | os.PathLike[str] | None) -> Target:
    """A file path (SQLite) or a store URL (postgresql://user@host/db, sqlite:///path); an unknown scheme is
    refused in one line."""
    raw = _raw_store(path_or_url)
    m = _URL.match(raw or "")
    if raw is None or m is None:
        file = resolve_path(raw)
        return Target("sqlite", None, mask(str(file)), file)
    scheme = m.group(1).lower()
    if scheme not in SCHEMES:
        raise ValueError(
            f"unknown store URL scheme {scheme!r} in {mask(raw)}: use a file path (SQLite) or postgresql://user@host/db"
        )
    if SCHEMES[scheme] == "sqlite":
        rest = urllib.parse.unquote(raw[len(m.group(0)) :])  # sqlite:///relative or sqlite:////absolute
        file = Path(rest.removeprefix("/"))
        return Target("sqlite", None, str(file), file)
    if raw[len(m.group(0)) :].split("/")[0].count("@") > 1:  # SQLAlchemy would read the password up to the first
        raise ValueError(
            f"the store URL {mask(raw)} has '@' more than once before the host: write an '@' in the "
            "user name or password as %40"
        )
    try:
        url = sa.make_url("postgresql+psycopg://" + raw[len(m.group(0)) :])
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"cannot read the store URL {mask(raw)}: {one_line(exc)}") from None
    if not url.database:
        raise ValueError(f"the store URL {mask(raw)} names no database: postgresql://user@host/DB")
    shown = mask(url.set(drivername="postgresql").render_as_string(hide_password=True))  # ?password=... too
    return Target("postgresql", url, shown)


def _sqlite_uri(file: Path, mode: str) -> str:
    quoted = urllib.parse.quote(str(file.absolute()))
    return (
        f"file:{quoted}?mode=ro"
        if mode == "ro"
        else (f"file:{quoted}?immutable=1" if mode == "immutable" else f"file:{quoted}?mode=rwc")
    )


def sqlite_connect(file: Path, mode: str) -> sqlite3.Connection:
    """A raw sqlite3 connection: mode 'rwc' (writers: then writer_pragmas), 'ro' or 'immutable' (a read-only
    file system)."""
    db = sqlite3.connect(
        _sqlite_uri(file, mode), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    if mode != "rwc":
        db.execute("PRAGMA query_only=ON")
    return db


def writer_pragmas(db: sqlite3.Connection) -> None:
    """Set once the file is known to be a dlbench store (or empty). WAL: readers never block the writer.
    FULL: a committed point survives a power loss (NORMAL, in WAL mode, may lose the last transactions)."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA foreign_keys=ON")


def sqlite_engine(raw: sqlite3.Connection) -> Engine:
    """An engine over one open sqlite3 connection; writers' transactions start with BEGIN IMMEDIATE."""
    engine = sa.create_engine("sqlite://", creator=lambda: raw, poolclass=StaticPool)

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")

    return engine


def postgres_engine(url: URL) -> Engine:
    """An engine for a PostgreSQL server (psycopg 3). Passwords come from the URL, PGPASSWORD or ~/.pgpass."""
    return sa.create_engine(
        url, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "dlbench"}
    )
