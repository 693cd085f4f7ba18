"""The result store: SQLite in WAL mode, versioned, migrated forward on open. Every point commits at once."""

from __future__ import annotations

import datetime
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from dlbench.results.migrations import MIGRATIONS, create_v1
from dlbench.results.schema import SCHEMA_VERSION, Environment, Metrics, PointResult, RankRaw
from dlbench.spec import PointSpec

DEFAULT_STORE = Path("dlbench-results") / "results.db"


class StoreError(Exception):
    """The store cannot be opened, written or understood; the message is one line for the user."""


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    """--store, else $DLBENCH_STORE, else ./dlbench-results/results.db; a folder gets results.db inside."""
    raw = path if path is not None else os.environ.get("DLBENCH_STORE")
    p = Path(raw) if raw else DEFAULT_STORE
    return p / "results.db" if p.is_dir() else p


@dataclass(frozen=True)
class RunRecord:
    """A run: a group of points made by one command."""

    id: str
    created: float
    kind: str
    command: str
    status: str
    meta: dict[str, object]
    points: int = 0


@dataclass(frozen=True)
class StoredPoint:
    """A point as kept: its row id, its run and its full result."""

    id: int
    run_id: str
    result: PointResult


class Store:
    """Open (creating and migrating as needed) the SQLite store at path."""

    def __init__(self, path: str | os.PathLike[str] | None = None, readonly: bool = False) -> None:
        self.path = resolve_path(path)
        if readonly and not self.path.exists():
            raise StoreError(f"no store at {self.path}: run `dlbench run` first, or pass --store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from None

    # -- schema ---------------------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The version this store is at."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "schema_meta" not in tables:
            return 0
        row = self.db.execute("SELECT value FROM schema_meta WHERE key='schema_version'").fetchone()
        return int(row[0])

    def _migrate(self) -> None:
        with self._tx():
            version = self.schema_version()
            if version > SCHEMA_VERSION:
                raise StoreError(f"the store at {self.path} has schema {version}, newer than this dlbench "
                                 f"({SCHEMA_VERSION}): upgrade dlbench")
            if version == 0:
                create_v1(self.db)
                version = 1
            while version < SCHEMA_VERSION:
                MIGRATIONS[version](self.db)
                version += 1
                self.db.execute("UPDATE schema_meta SET value=? WHERE key='schema_version'", (str(version),))

    @contextmanager
    def _tx(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    # -- writing --------------------------------------------------------------------------------------
    def create_run(self, command: str, kind: str = "run", meta: dict[str, object] | None = None) -> str:
        """A new run; returns its id (time-ordered and readable, e.g. 20261123-141503-3fa2)."""
        now = datetime.datetime.now()
        run_id = f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        try:
            with self._tx():
                self.db.execute("INSERT INTO runs (id, created, command, status, kind, meta_json) "
                                "VALUES (?,?,?,?,?,?)", (run_id, now.timestamp(), command, "running", kind,
                                                         json.dumps(meta or {})))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the store at {self.path}: {exc}") from None
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark a run done (or interrupted)."""
        with self._tx():
            self.db.execute("UPDATE runs SET status=? WHERE id=?", (status, run_id))

    def add_point(self, run_id: str, result: PointResult) -> int:
        """Commit one point at once; returns its id."""
        s = result.spec
        row = (run_id, s.key(), s.framework, s.model, s.batch_size, s.precision, result.status, result.error,
               s.to_json(), json.dumps([asdict(r) for r in result.ranks]),
               json.dumps(asdict(result.metrics)) if result.metrics else None,
               json.dumps({**result.env.identity, **result.env.descriptive}),
               json.dumps(result.env.identity), json.dumps(result.env.descriptive), json.dumps(result.extra),
               result.started, result.finished)
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO points (run_id, spec_key, framework, model, batch_size, precision, status, error, "
                "spec_json, ranks_json, metrics_json, env_json, identity_json, descriptive_json, extra_json, "
                "started, finished) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
        return int(cur.lastrowid or 0)

    # -- reading --------------------------------------------------------------------------------------
    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first, with their point counts."""
        sql = ("SELECT r.id, r.created, r.kind, r.command, r.status, r.meta_json, COUNT(p.id) FROM runs r "
               "LEFT JOIN points p ON p.run_id = r.id GROUP BY r.id ORDER BY r.created DESC, r.id DESC")
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [RunRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in self.db.execute(sql)]

    def get_run(self, run_id: str) -> RunRecord:
        """One run by id (a unique prefix will do)."""
        rows = [r for r in self.runs() if r.id == run_id] or [r for r in self.runs() if r.id.startswith(run_id)]
        if len(rows) != 1:
            raise StoreError(f"no run {run_id!r} in {self.path}" if not rows else f"run id {run_id!r} is ambiguous")
        return rows[0]

    def points(self, run_ids: list[str] | None = None) -> list[StoredPoint]:
        """Points of the given runs (all runs when None), oldest first."""
        sql = ("SELECT id, run_id, spec_json, status, error, ranks_json, metrics_json, identity_json, "
               "descriptive_json, extra_json, started, finished FROM points")
        args: list[str] = []
        if run_ids is not None:
            sql += f" WHERE run_id IN ({','.join('?' * len(run_ids))})"
            args = list(run_ids)
        out = []
        for r in self.db.execute(sql + " ORDER BY id", args):
            result = PointResult(
                spec=PointSpec.from_json(r[2]), status=r[3], error=r[4],
                ranks=tuple(RankRaw.from_dict(x) for x in json.loads(r[5])),
                metrics=Metrics.from_dict(json.loads(r[6])) if r[6] else None,
                env=Environment(identity=json.loads(r[7]), descriptive=json.loads(r[8])),
                extra=json.loads(r[9]), started=r[10], finished=r[11])
            out.append(StoredPoint(r[0], r[1], result))
        return out

    def done_keys(self, run_id: str) -> set[str]:
        """Spec keys of the points already stored in a run (to resume it)."""
        return {r[0] for r in self.db.execute("SELECT spec_key FROM points WHERE run_id=?", (run_id,))}
