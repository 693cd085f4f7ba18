"""Forward migrations of the SQLite store, one function per version step (as asv's update_to_N)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from dlbench.results.env import IDENTITY_KEYS

V1_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, created REAL NOT NULL, command TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE points (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id), spec_key TEXT NOT NULL,
  framework TEXT NOT NULL, model TEXT NOT NULL, batch_size INTEGER NOT NULL, precision TEXT NOT NULL,
  status TEXT NOT NULL, error TEXT, spec_json TEXT NOT NULL, ranks_json TEXT NOT NULL, metrics_json TEXT,
  env_json TEXT NOT NULL, started REAL NOT NULL, finished REAL NOT NULL);
CREATE INDEX points_run ON points(run_id);
"""


def _v1_to_v2(db: sqlite3.Connection) -> None:
    """v2 splits the environment into identity and descriptive keys, and gives runs a kind and metadata."""
    db.execute("ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run'")
    db.execute("ALTER TABLE runs ADD COLUMN meta_json TEXT NOT NULL DEFAULT '{}'")
    db.execute("ALTER TABLE points ADD COLUMN identity_json TEXT NOT NULL DEFAULT '{}'")
    db.execute("ALTER TABLE points ADD COLUMN descriptive_json TEXT NOT NULL DEFAULT '{}'")
    db.execute("ALTER TABLE points ADD COLUMN extra_json TEXT NOT NULL DEFAULT '{}'")
    rows = db.execute("SELECT id, env_json FROM points").fetchall()
    for pid, env_json in rows:
        env = json.loads(env_json or "{}")
        ident = {k: str(v) for k, v in env.items() if k in IDENTITY_KEYS}
        desc = {k: str(v) for k, v in env.items() if k not in IDENTITY_KEYS}
        db.execute("UPDATE points SET identity_json=?, descriptive_json=? WHERE id=?",
                   (json.dumps(ident), json.dumps(desc), pid))


# MIGRATIONS[n] upgrades a store at version n to n + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_to_v2}


def create_v1(db: sqlite3.Connection) -> None:
    """Create an empty version-1 store (new stores start here and migrate forward)."""
    for statement in V1_SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)  # not executescript(): that would commit the caller's transaction
    db.execute("CREATE TABLE schema_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO schema_meta VALUES ('schema_version', '1')")
