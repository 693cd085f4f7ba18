"""The store keeps every raw sample, opens old stores by migrating them forward, and refuses bad paths and
URLs in one line. Each test that can runs on SQLite and on a real PostgreSQL server (store_url)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from dlbench.parallel import Layout
from dlbench.spec import PointSpec
from dlbench.store.migrations import STORE_SCHEMA_VERSION, upgrade
from dlbench.store.rows import point_row
from dlbench.store.store import Store, StoreError, resolve_path
from dlbench.store.store_sql import mask, parse_target, points, postgres_engine, runs
from tests.support.stores import FIXTURES, PgServer, load_v1_sqlite, result


def test_round_trip_keeps_raw_samples_metrics_and_env(store_url: str) -> None:
    store = Store(store_url)
    run = store.create_run("dlbench run", meta={"preset": "quick"})
    store.add_point(run, result())
    store.add_point(run, result("oom"))
    store.finish_run(run, "done")
    again = Store(store_url, readonly=True)
    [r] = again.runs()
    assert (r.id, r.status, r.points, r.meta) == (run, "done", 2, {"preset": "quick"})
    ok, oom = again.points([run])
    assert ok.result == result()
    assert ok.result.ranks[0].repeats[0].step_times == (0.1, 0.2, 0.1, 0.1, 0.1)
    assert (oom.result.status, oom.result.error, oom.result.metrics) == ("oom", "boom", None)
    assert len({ok.uid, oom.uid}) == 2 and all(len(p.uid) == 36 for p in (ok, oom))  # UUIDs
    assert again.done_keys(run) == {result().spec.key()}
    assert again.get_run(run[:15]).id == run
    assert again.schema_version() == STORE_SCHEMA_VERSION


def test_sqlite_store_uses_wal_and_full_sync(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create_run("x")  # the file is made with its first row (#25)
    assert store.schema_version() == STORE_SCHEMA_VERSION
    assert store.db.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert store.db.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


def load_v1_postgres(url: str) -> None:
    """The v1 schema through Alembic's v1 revision, then the fixture's rows (its INSERTs are plain SQL)."""
    engine = postgres_engine(parse_target(url).url)  # type: ignore[arg-type]
    inserts = [
        s
        for s in (FIXTURES / "store_v1.sql").read_text().split(";\n")
        if s.startswith("INSERT INTO runs") or s.startswith("INSERT INTO points")
    ]
    with engine.begin() as conn:
        upgrade(conn, to=1)
        for statement in inserts:
            conn.exec_driver_sql(statement.replace("%", "%%"))
    engine.dispose()


def test_migrates_a_version_1_store_forward(store_url: str) -> None:
    if store_url.startswith("postgresql"):
        load_v1_postgres(store_url)
    else:
        Path(store_url).parent.mkdir(parents=True)
        load_v1_sqlite(Path(store_url))
    store = Store(store_url)
    assert store.schema_version() == STORE_SCHEMA_VERSION
    [run] = store.runs()
    assert run.kind == "run" and run.points == 1 and run.status == "done"
    [p] = store.points()
    assert p.result.env.identity["framework_version"] == "2.13.0+cpu"
    assert p.result.env.descriptive["hostname"] == "old-host"
    assert "hostname" not in p.result.env.identity
    assert p.result.ranks[0].repeats[2].wall_s == 10.0
    assert len(p.uid) == 36  # the migration gave the old point a unique id
    store.add_point(run.id, result())  # and the migrated store takes new points
    assert len(Store(store_url, readonly=True).points()) == 2


def test_a_deferred_open_migrates_at_first_use_only(store_url: str) -> None:
    """`Store.open(defer=True)` (the checks before a run) reads an old store's version and writes nothing; its
    first use sets it up for writing, migration included (#43)."""
    if store_url.startswith("postgresql"):
        load_v1_postgres(store_url)
    else:
        Path(store_url).parent.mkdir(parents=True)
        load_v1_sqlite(Path(store_url))
    probe = postgres_engine(parse_target(store_url).url) if store_url.startswith("postgresql") else None

    def state() -> object:
        """The SQLite file's bytes; the server's schema revision."""
        if probe is None:
            return Path(store_url).read_bytes()
        with probe.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()

    untouched = state()
    store = Store.open(store_url, defer=True)
    assert state() == untouched
    assert store.schema_version() == STORE_SCHEMA_VERSION and state() != untouched
    if probe is not None:
        probe.dispose()
    with pytest.raises(ValueError, match="cannot take back recovery files"):
        Store.open(store_url, defer=True, recover=True)


def test_newer_store_is_refused(store_url: str) -> None:
    store = Store(store_url)
    store.create_run("x")  # a SQLite store file is made with its first row (#25)
    with store.db.begin():
        store.db.exec_driver_sql("UPDATE alembic_version SET version_num='v999'")
    for readonly in (False, True):
        with pytest.raises(StoreError, match="newer than this dlbench"):
            Store(store_url, readonly=readonly)


def test_unreadable_schema_version_is_one_line(store_url: str) -> None:
    store = Store(store_url)
    store.create_run("x")  # a SQLite store file is made with its first row (#25)
    with store.db.begin():
        store.db.exec_driver_sql("UPDATE alembic_version SET version_num='garbage'")
    with pytest.raises(StoreError, match="unreadable schema version") as exc:
        Store(store_url, readonly=True)
    assert "\n" not in str(exc.value)


def test_unwritable_and_missing_stores(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(blocker / "sub" / "results.db")
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "none.db", readonly=True)
    with pytest.raises(StoreError, match="no run"):
        Store(tmp_path / "s.db").get_run("nope")


def test_path_and_url_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_STORE", str(tmp_path))
    with pytest.raises(StoreError, match="is a folder: name the store's file"):  # a folder is refused (#31)
        resolve_path()
    monkeypatch.setenv("DLBENCH_STORE", str(tmp_path / "results.db"))
    assert resolve_path() == tmp_path / "results.db"
    assert resolve_path(tmp_path / "x.db") == tmp_path / "x.db"
    monkeypatch.setenv("DLBENCH_STORE", "postgresql://me:secret@db.example/bench")
    assert parse_target(None).dialect == "postgresql"
    assert parse_target(None).display == "postgresql://me:***@db.example/bench"
    monkeypatch.delenv("DLBENCH_STORE")
    assert resolve_path() == Path("dlbench-results") / "results.db"
    assert parse_target(f"sqlite:///{tmp_path}/a.db").file == tmp_path / "a.db"
    assert mask("push --to postgresql://u:p4ss@h:5432/d ok") == "push --to postgresql://u:***@h:5432/d ok"
    assert (
        parse_target("postgresql://u@h/d?password=p4ss&sslmode=require").display
        == "postgresql://u@h/d?password=***&sslmode=require"
    )


def test_unknown_scheme_is_refused_in_one_line() -> None:
    with pytest.raises(StoreError, match="unknown store URL scheme 'mysql'") as exc:
        Store("mysql://root:hunter2@localhost/db")
    assert "hunter2" not in str(exc.value)


def test_unreachable_server_and_wrong_password_never_show_the_password(pg_server: PgServer) -> None:
    wrong = sa.make_url(pg_server.admin_url).set(password="not-the-password-42")
    with pytest.raises(StoreError, match="cannot open the store at") as exc:
        Store(wrong.render_as_string(hide_password=False))
    assert "not-the-password-42" not in str(exc.value) and "***" in str(exc.value)
    assert "\n" not in str(exc.value)
    closed = wrong.set(host="127.0.0.1", port=1)
    with pytest.raises(StoreError, match="cannot open the store at") as exc:
        Store(closed.render_as_string(hide_password=False))
    assert "not-the-password-42" not in str(exc.value)


def test_password_from_pgpassword_and_pgpass(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = sa.make_url(pg_url)
    bare = url.set(password=None).render_as_string(hide_password=False)
    monkeypatch.setenv("PGPASSWORD", str(url.password))
    store = Store(bare)
    assert str(url.password) not in str(store.path)
    run = store.create_run(f"dlbench run --store {pg_url}")
    assert str(url.password) not in Store(bare, readonly=True).get_run(run).command  # never stored
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"{url.host}:{url.port}:*:{url.username}:{url.password}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert [r.id for r in Store(bare, readonly=True).runs()] == [run]


def _version_2_spec(spec: PointSpec) -> str:
    """The spec as dlbench kept it before v4 (spec version 2): its layout's options flat on it."""
    d = spec.to_dict()
    layout = d.pop("layout")
    assert isinstance(layout, dict)
    d.update({("pipeline_schedule" if k == "schedule" else k): v for k, v in layout.items()}, version=2)
    return json.dumps(d, sort_keys=True)


def test_migrates_a_version_3_store_with_flat_layouts_forward(store_url: str) -> None:
    """A store of the previous schema (v3), whose specs keep the layout's options flat, reads and migrates: each
    spec gets its `layout` (spec_key, the point's identity, unchanged), and old points still match new ones."""
    split = dataclasses.replace(
        result().spec,
        model="gpt",
        devices_per_node=4,
        layout=Layout(tensor_parallel=2, pipeline_parallel=2, micro_batches=4, schedule="gpipe", recompute=True),
    )
    bucketed = dataclasses.replace(result().spec, devices_per_node=2, strategy="ddp", layout=Layout(bucket_mb=50))
    target = parse_target(store_url)
    if target.file is not None:
        target.file.parent.mkdir(parents=True)
    engine = postgres_engine(target.url) if target.file is None else sa.create_engine(f"sqlite:///{target.file}")
    with engine.begin() as conn:
        upgrade(conn, to=3)
        conn.execute(runs.insert().values(id="r1", created=1.0, command="dlbench run", status="done"))
        for i, spec in enumerate((result().spec, split, bucketed)):
            row = {**point_row("r1", f"uid-{i}", dataclasses.replace(result(), spec=spec))}
            conn.execute(points.insert().values(**{**row, "spec_json": _version_2_spec(spec)}))
    engine.dispose()
    assert '"tensor_parallel": 2' in _version_2_spec(split) and '"layout"' not in _version_2_spec(split)
    store = Store(store_url)
    assert store.schema_version() == STORE_SCHEMA_VERSION == 4
    stored = [p.result.spec for p in store.points()]
    assert stored == [result().spec, split, bucketed]
    assert stored[1].layout.label == "TP2 PP2 M4 recompute" and stored[1].layout.schedule == "gpipe"
    assert stored[2].layout.bucket_mb == 50 and stored[2].version == 3
    assert store.done_keys("r1") == {s.key() for s in (result().spec, split, bucketed)}
    texts = [str(t) for (t,) in store.db.execute(sa.select(points.c.spec_json).order_by(points.c.id))]
    assert all('"layout"' in t and '"tensor_parallel"' not in t.split('"layout"')[0] for t in texts)
    assert json.loads(texts[1])["layout"]["tensor_parallel"] == 2
