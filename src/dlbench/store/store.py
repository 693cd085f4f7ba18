"""The result store: a SQLite file (the default) or a PostgreSQL server, one SQLAlchemy Core layer for both,
versioned and migrated forward by Alembic. Every point commits at once; a point the store cannot take goes to
a recovery file instead of being lost. Read-only opens never write, create or migrate anything.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dlbench.records import PointResult
from dlbench.store import recovery
from dlbench.store.claims import ClaimTaken, advisory_claim, controller, controller_gone, file_claim, lock_file
from dlbench.store.errors import PointNotStored
from dlbench.store.migrations import STORE_SCHEMA_VERSION, SchemaError, check_version, stored_version, upgrade
from dlbench.store.recovery import Recovered
from dlbench.store.rows import CorruptRow, RunRecord, StoredPoint, point_row, run_record, stored_point
from dlbench.store.store_file import (
    CREATION_WAIT_S,
    create_store_file,
    just_made,
    nearest_folder_problem,
    read_only_place,
    wait_for_creator,
)
from dlbench.store.store_sql import (
    DEFAULT_STORE,
    StoreError,
    Target,
    mask,
    metadata,
    one_line,
    parse_target,
    points,
    postgres_engine,
    resolve_path,
    runs,
    sqlite_connect,
    sqlite_engine,
    writer_pragmas,
)

DB_ERRORS = (sa.exc.SQLAlchemyError, sqlite3.Error, OverflowError, OSError)
FINAL_STATUSES = ("done", "interrupted", "failed")


MAX_CANDIDATES = 5  # run ids an ambiguous part names


class Store:
    """Open the store at a path or URL (creating and migrating it as needed, unless readonly); it reads no recovery
    file back unless asked (`Store.open(recover=True)`, `take_back`): a check before a run writes no point. With
    `defer`, an existing store is only checked now (read, never written) and set up for writing (WAL, migration)
    at its first use: a run's checks write nothing to it."""

    def __init__(self, path: str | os.PathLike[str] | None = None, readonly: bool = False, defer: bool = False) -> None:
        try:
            self.target: Target = parse_target(path)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        self.readonly = readonly
        self.path: Path | str = self.target.file if self.target.file is not None else self.target.display
        self.recovery_paths = recovery.recovery_paths(self.target.file, self.target.display)
        self.engine: Engine
        self.db: Connection
        self._pending: Path | None = None  # a SQLite file to make at the first write
        self._deferred = defer and not readonly  # an existing store to set up for writing at its first use
        self._raw: sqlite3.Connection | None = None  # the SQLite connection (a deferred writer's pragmas wait)
        if self.target.file is not None:
            self._open_sqlite(self.target.file)
        else:
            self._open_postgres()
        self.recovered = Recovered(0, 0, 0, ())

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        readonly: bool = False,
        recover: bool = False,
        defer: bool = False,
    ) -> Store:
        """Open the store; with `recover` (a writer about to store points) first take back what an earlier writer
        could not store (`take_back`); with `defer` (the checks before a run) write nothing until its first use.
        A read-only open never writes, so it never recovers."""
        if recover and (readonly or defer):
            raise ValueError("a read-only or deferred store cannot take back recovery files")
        store = cls(path, readonly=readonly, defer=defer)
        if recover:
            store.take_back()
        return store

    def take_back(self) -> Recovered:
        """Read the recovery files back (`recover`), kept in `recovered`; a failure is counted there, not raised:
        the file stays and `dlbench results --recover` says what fails."""
        try:
            self.recovered = self.recover()
        except StoreError as exc:
            self.recovered = Recovered(0, 0, 1, (), (str(exc),))
        return self.recovered

    # -- opening --------------------------------------------------------------------------------------
    def _fail_open(self, exc: BaseException) -> StoreError:
        return StoreError(f"cannot open the store at {self.path}: {one_line(exc)}")

    def _open_sqlite(self, file: Path) -> None:
        if self.readonly:
            raw = self._made_readable(file)
        elif not file.exists():  # made when its first row is written (store_file.py): until then, empty
            self._open_pending(file)
            return
        else:
            try:
                raw = sqlite_connect(file, "rwc")
                self._probe_version(raw, empty_ok=True)  # a foreign file is refused before any change to it
                if not self._deferred:
                    writer_pragmas(raw)
            except sqlite3.DatabaseError as exc:
                if "not a database" in str(exc):
                    raise StoreError(f"{file} is not a dlbench store (not a SQLite database)") from None
                raise self._fail_open(exc) from None
            except OSError as exc:
                raise self._fail_open(exc) from None
        self._raw = raw
        self.engine = sqlite_engine(raw)
        self.db = self.engine.connect()
        if not self._deferred:  # deferred: checked (_probe_version); WAL and migration at first use
            self._check_and_migrate()

    def _set_up_for_writing(self) -> None:
        """A deferred store's first use: what a writer's open does (WAL and the pragmas for SQLite, the migration)."""
        self._deferred = False
        if self._raw is not None:
            try:
                writer_pragmas(self._raw)
            except sqlite3.Error as exc:
                raise self._fail_open(exc) from None
        self._check_and_migrate()

    def _open_pending(self, file: Path) -> None:
        """A writer's store that does not exist yet: checked to be creatable, read as an empty store in memory,
        and made on the first write (_materialise)."""
        problem = nearest_folder_problem(file)
        if problem:
            raise StoreError(f"cannot open the store at {file}: {problem}")
        self._pending, self._deferred = file, False
        self.engine = sqlite_engine(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))
        self.db = self.engine.connect()
        with self.db.begin():
            metadata.create_all(self.db)

    def _materialise(self) -> None:
        """Make the pending store file, all at once (or take the one another process just made), and open it."""
        file, self._pending = self._pending, None
        assert file is not None
        try:
            create_store_file(file)
        except SchemaError as exc:
            raise StoreError(f"the store at {file}: {exc}") from None
        except (sqlite3.Error, OSError) as exc:
            self._pending = file
            raise self._fail_open(exc) from None
        self.db.close()
        self.engine.dispose()
        self._open_sqlite(file)

    def _made_readable(self, file: Path) -> sqlite3.Connection:
        """A reader's connection, once the store is made: it waits (up to CREATION_WAIT_S) while another process
        creates it, absent with a live temporary beside it or just made and still empty; an old empty database is
        refused at once."""
        deadline = time.monotonic() + CREATION_WAIT_S
        while True:
            if not file.exists() and wait_for_creator(file, CREATION_WAIT_S) and not file.exists():
                raise StoreError(f"the store at {file} is being created by another process: try again in a moment")
            if not file.exists():
                raise StoreError(f"no store at {file}: run `dlbench run` first, or pass --store")
            raw = self._sqlite_readable(file)
            if raw is not None:
                return raw
            if time.monotonic() > deadline or not just_made(file):
                raise StoreError(f"{self.path} is not a dlbench store (an empty database)")
            time.sleep(0.05)

    def _sqlite_readable(self, file: Path) -> sqlite3.Connection | None:
        """mode=ro; where the WAL's index cannot be made (a read-only file system or folder) immutable=1; None for
        an empty database. A lock held past the busy timeout fails, never falls back to immutable=1, which reads
        around the locks and the WAL (a store being written could read as empty). An old store is copied into
        memory and migrated there, never in place."""
        last: BaseException | None = None
        for mode in ("ro", "immutable"):
            try:
                raw = sqlite_connect(file, mode)
                raw.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.DatabaseError as exc:
                last = exc
                if "not a database" in str(exc):
                    raise StoreError(f"{file} is not a dlbench store (not a SQLite database)") from None
                if not read_only_place(file):
                    break
                continue
            version = self._probe_version(raw, empty_ok=True)
            if version == 0:
                raw.close()
                return None
            if version == STORE_SCHEMA_VERSION:
                return raw
            mem = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            raw.backup(mem)
            raw.close()
            return mem
        raise self._fail_open(last or OSError("unreadable"))

    def _probe_version(self, raw: sqlite3.Connection, empty_ok: bool = False) -> int:
        engine = sqlite_engine(raw)
        with engine.connect() as conn:
            version = self._version_of(conn)
        if version == 0 and not empty_ok:
            raise StoreError(f"{self.path} is not a dlbench store (an empty database)")
        return version

    def _version_of(self, conn: Connection) -> int:
        try:
            with conn.begin():
                version = stored_version(conn)
            check_version(version)
            return version
        except SchemaError as exc:
            kind = "is not a dlbench store" if str(exc).startswith("not a") else "cannot be read"
            raise StoreError(f"the store at {self.path} {kind}: {exc}") from None
        except DB_ERRORS as exc:
            raise self._fail_open(exc) from None

    def _open_postgres(self) -> None:
        assert self.target.url is not None
        try:
            self.engine = postgres_engine(self.target.url)
            self.db = self.engine.connect()
            if self.readonly:
                self.db.exec_driver_sql("SET default_transaction_read_only = on")
                self.db.commit()
        except DB_ERRORS as exc:
            raise self._fail_open(exc) from None
        if self._deferred:
            self._version_of(self.db)  # a foreign or newer store is refused now; the migration waits for first use
        else:
            self._check_and_migrate()

    def _check_and_migrate(self) -> None:
        version = self._version_of(self.db)
        if self.readonly and version == 0:
            raise StoreError(f"no store at {self.path}: run `dlbench run` (or `dlbench store push`) first")
        if self.readonly and version < STORE_SCHEMA_VERSION and self.target.file is None:
            raise StoreError(
                f"the store at {self.path} has schema {version}, older than this dlbench's "
                f"{STORE_SCHEMA_VERSION}: run any write command to migrate it"
            )
        if version < STORE_SCHEMA_VERSION:  # read-only SQLite: the in-memory copy
            try:
                self.db.info["write"] = True
                with self.db.begin():
                    upgrade(self.db)
            except SchemaError as exc:
                raise StoreError(f"the store at {self.path}: {exc}") from None
            except DB_ERRORS as exc:
                raise StoreError(f"cannot migrate the store at {self.path}: {one_line(exc)}") from None

    # -- plumbing -------------------------------------------------------------------------------------
    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """A transaction (BEGIN IMMEDIATE for SQLite writers); any database error becomes a one-line StoreError."""
        if write and self.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only")
        if write and self._pending is not None:
            self._materialise()
        if self._deferred:
            self._set_up_for_writing()
        try:
            self.db.info["write"] = write
            with self.db.begin():
                yield self.db
        except DB_ERRORS as exc:
            raise StoreError(
                f"{'cannot write to' if write else 'cannot read'} the store at {self.path}: {one_line(exc)}"
            ) from None

    def schema_version(self) -> int:
        """The version this store is at (a store not made yet will be made at the newest)."""
        if self._pending is not None:
            return STORE_SCHEMA_VERSION
        with self.transaction():
            try:
                return stored_version(self.db)
            except SchemaError as exc:
                raise StoreError(f"the store at {self.path}: {exc}") from None

    def close(self) -> None:
        """Close the connection."""
        self.db.close()
        self.engine.dispose()

    # -- writing --------------------------------------------------------------------------------------
    def create_run(self, command: str, kind: str = "run", meta: dict[str, object] | None = None) -> str:
        """A new run; returns its id (time-ordered, readable and globally unique, e.g. 20261123-141503-3fa29c01)."""
        now = datetime.datetime.now()
        run_id = f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"
        host, pid, started = controller()
        with self.transaction(write=True) as c:
            c.execute(
                runs.insert().values(
                    id=run_id,
                    created=now.timestamp(),
                    command=mask(command),
                    status="running",
                    kind=kind,
                    meta_json=mask(json.dumps(meta or {})),
                    host=host,
                    pid=pid,
                    pid_started=started,
                )
            )
        return run_id

    def finish_run(self, run_id: str, status: str, reason: str | None = None) -> None:
        """Set a run's status (done, interrupted, failed with a one-line reason, or running again: this process
        then becomes its controller)."""
        values: dict[str, object] = {"status": status, "reason": mask(reason.splitlines()[0]) if reason else None}
        if status == "running":
            values.update(zip(("host", "pid", "pid_started"), controller()))
        with self.transaction(write=True) as c:
            c.execute(runs.update().where(runs.c.id == run_id).values(**values))

    def add_point(self, run_id: str, result: PointResult) -> int:
        """Commit one point at once; returns its row id. The one place a result becomes a row: when the store
        fails, the point goes to the recovery file, the run is marked failed, and PointNotStored says where. When
        no recovery file can be written either, the record is printed on stderr as one JSON line, the last place
        left, and the run is still marked failed with the reason."""
        uid = str(uuid.uuid4())
        row = point_row(run_id, uid, result)
        try:
            with self.transaction(write=True) as c:
                return int(c.execute(points.insert().values(**row)).inserted_primary_key[0])  # type: ignore[index]
        except StoreError as exc:
            failure = str(exc)
        what = f"{result.spec.framework} {result.spec.model} batch {result.spec.batch_size}"
        record: dict[str, object] = {
            "run": self._run_row(run_id),
            "row": row,
            "store": self.target.display,
            "error": failure,
            "time": time.time(),
        }
        try:
            where = recovery.append(self.recovery_paths, record)
        except OSError as exc:
            print(json.dumps({"format": recovery.FORMAT_VERSION, **record}, sort_keys=True), file=sys.stderr)
            lost = (
                f"{failure}; the point ({what}) could not be kept in a recovery file either "
                f"({exc.strerror or exc}): its record is the JSON line above on stderr"
            )
            self._fail_run(run_id, f"store write failed and no recovery file could be written: {failure}")
            raise PointNotStored(lost) from None
        self._fail_run(run_id, f"store write failed: {failure}")
        raise PointNotStored(
            f"{failure}; the point ({what}) was kept in {where}: after fixing the store, run "
            f"`dlbench results --recover --store {self.target.display}`"
        )

    def _fail_run(self, run_id: str, reason: str) -> None:
        try:
            self.finish_run(run_id, "failed", reason)
        except StoreError:
            pass  # the store refuses even that; the point is in the recovery file (or on stderr)

    def _run_row(self, run_id: str) -> dict[str, object] | None:
        try:
            with self.transaction() as c:
                row = c.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().first()
            return dict(row) if row else None
        except StoreError:
            return None

    def recover(self) -> Recovered:
        """Read the recovery files back into the store (idempotent: keyed on each point's unique id)."""
        return recovery.read_back(self.recovery_paths, self.transaction)

    @contextmanager
    def claim_run(self, run_id: str) -> Iterator[None]:
        """Be the run's only controller while the block runs: a second claimant gets StoreError naming us."""
        if self.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only")
        if self.target.file is not None:
            claim = file_claim(lock_file(self.target.file, run_id))
        else:
            claim = advisory_claim(self.engine, run_id)
        try:
            with claim:
                with self.transaction(write=True) as c:
                    c.execute(
                        runs.update()
                        .where(runs.c.id == run_id)
                        .values(**dict(zip(("host", "pid", "pid_started"), controller())))
                    )
                yield
        except ClaimTaken as taken:
            holder = taken.holder or self._holder(run_id)
            raise StoreError(f"run {run_id} is being resumed by another dlbench ({holder})") from None
        except OSError as exc:
            raise StoreError(f"cannot claim run {run_id} in {self.path}: {exc}") from None
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot claim run {run_id} in {self.path}: {one_line(exc)}") from None

    def _holder(self, run_id: str) -> str:
        row = self._run_row(run_id)
        return f"pid {row['pid']} on {row['host']}" if row and row.get("pid") else "pid unknown"

    # -- reading --------------------------------------------------------------------------------------
    def _record(self, row: sa.RowMapping, count: int) -> RunRecord:
        status = row["status"]
        if status == "running" and controller_gone(row["host"], row["pid"], row["pid_started"]):
            status = "interrupted"  # its controller died without a word (kill -9, a crash, a power cut)
        try:
            return run_record(row, status, count)
        except CorruptRow as exc:
            raise StoreError(f"run {row['id']} in {self.path}: {exc}") from None

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first, with their point counts."""
        n = sa.select(points.c.run_id, sa.func.count().label("n")).group_by(points.c.run_id).subquery()
        q = (
            sa.select(runs, sa.func.coalesce(n.c.n, 0).label("n"))
            .outerjoin(n, n.c.run_id == runs.c.id)
            .order_by(runs.c.created.desc(), runs.c.id.desc())
        )
        if limit:
            q = q.limit(int(limit))
        with self.transaction() as c:
            rows = c.execute(q).mappings().all()
        return [self._record(r, int(r["n"])) for r in rows]

    def get_run(self, run_id: str) -> RunRecord:
        """One run by id: the whole id, else a unique prefix, else a unique part of it (the hash people copy);
        an ambiguous part is refused naming its candidates."""
        with self.transaction() as c:
            ids = [str(r[0]) for r in c.execute(sa.select(runs.c.id))]
        found = (
            [i for i in ids if i == run_id]
            or [i for i in ids if i.startswith(run_id)]
            or [i for i in ids if run_id and run_id in i]
        )
        if len(found) != 1:
            if not found:
                raise StoreError(f"no run {run_id!r} in {self.path}")
            shown = ", ".join(sorted(found)[:MAX_CANDIDATES]) + (
                f" and {len(found) - MAX_CANDIDATES} more" if len(found) > MAX_CANDIDATES else ""
            )
            raise StoreError(
                f"run id {run_id!r} is ambiguous: it matches {len(found)} runs ({shown}); give more of the id"
            )
        with self.transaction() as c:
            row = c.execute(sa.select(runs).where(runs.c.id == found[0])).mappings().one()
            count = c.execute(sa.select(sa.func.count()).where(points.c.run_id == found[0])).scalar_one()
        return self._record(row, int(count))

    def points(
        self,
        run_ids: Sequence[str] | None = None,
        *,
        models: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
        since: float | None = None,
    ) -> list[StoredPoint]:
        """Points of the given runs (all runs when None), oldest first; optionally only these models and
        frameworks, finished at or after `since` (a POSIX time)."""
        q = sa.select(points).order_by(points.c.id)
        if run_ids is not None:
            q = q.where(points.c.run_id.in_(list(run_ids)))
        if models:
            q = q.where(points.c.model.in_(list(models)))
        if frameworks:
            q = q.where(points.c.framework.in_(list(frameworks)))
        if since is not None:
            q = q.where(points.c.finished >= since)
        with self.transaction() as c:
            rows = c.execute(q).mappings().all()
        out = []
        for r in rows:
            try:
                out.append(stored_point(r))
            except CorruptRow as exc:
                raise StoreError(f"point {r['uid'] or r['id']} of run {r['run_id']} in {self.path}: {exc}") from None
        return out

    def done_keys(self, run_id: str) -> set[str]:
        """Spec keys of the points already stored in a run (to resume it)."""
        with self.transaction() as c:
            return {str(r[0]) for r in c.execute(sa.select(points.c.spec_key).where(points.c.run_id == run_id))}

    def stored_rows(self, run_ids: Sequence[str]) -> dict[str, dict[str, object]]:
        """The points of these runs exactly as stored (their raw columns), by point uid, for verification."""
        cols = (
            points.c.uid,
            points.c.run_id,
            points.c.status,
            points.c.batch_size,
            points.c.framework,
            points.c.model,
            points.c.precision,
            points.c.spec_key,
            points.c.metrics_json,
            points.c.ranks_json,
        )
        with self.transaction() as c:
            rows = c.execute(sa.select(*cols).where(points.c.run_id.in_(list(run_ids)))).mappings().all()
        return {str(r["uid"]): dict(r) for r in rows}

    def point_uids(self, run_ids: Sequence[str]) -> set[str]:
        """The unique ids of the points of these runs."""
        with self.transaction() as c:
            return {str(r[0]) for r in c.execute(sa.select(points.c.uid).where(points.c.run_id.in_(list(run_ids))))}


__all__ = [
    "DEFAULT_STORE",
    "PointNotStored",
    "Recovered",
    "RunRecord",
    "Store",
    "StoreError",
    "StoredPoint",
    "resolve_path",
]
