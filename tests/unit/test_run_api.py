"""The run API under `dlbench run` and `dlbench sweep`, called directly with the fake backend: a frozen request,
every check before anything is written, points executed into one stored run, an outcome the command renders."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pytest

from dlbench.cli.values import as_only
from dlbench.points import Axes, Shared
from dlbench.records import PointResult
from dlbench.runapi.run import RunHooks, RunRequest, execute_run, prepare_run
from dlbench.runapi.sweep import PlannedSweep, PreparedSweep, SweepHooks, SweepRequest, execute_sweep, prepare_sweep
from dlbench.spec import PointSpec, Protocol, SpecError
from dlbench.store.migrations import STORE_SCHEMA_VERSION
from dlbench.store.store import Store
from tests.support.stores import load_v1_sqlite

QUICK = Shared(protocol=Protocol(0, 1, 1, "median", preset="quick"), device="cpu")


def request(batches: tuple[int, ...] = (), shared: Shared = QUICK, **kw: object) -> RunRequest:
    """A typed run request of fake ResNet-50 points, as `dlbench run -f fake -m resnet50` parses it."""
    axes = Axes(frameworks=("fake",), models=("resnet50",), batches=batches)
    return RunRequest(axes=axes, shared=shared, **kw)  # type: ignore[arg-type]


SUITE = """\
name: api-sweep
device: cpu
protocol: {preset: quick, warmup: 0, steps: 1, repeats: 1}
timeout: 120
axes:
  framework: fake
  model: [alexnet]
  batch: [min, fixed]
"""


class Recorder:
    """A progress display that keeps what it was told."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started: list[PointSpec] = []
        self.done: list[PointResult] = []
        self.notes: list[str] = []
        self.restarted: list[int] = []


def hooks_into(seen: list[Recorder], notes: list[str]) -> tuple[object, object]:
    @contextmanager
    def progress(total: int) -> Iterator[object]:
        rec = Recorder(total)
        seen.append(rec)
        yield type(
            "UI",
            (),
            {
                "started": lambda self, i, spec: rec.started.append(spec),
                "done": lambda self, i, result: rec.done.append(result),
                "note": lambda self, text: rec.notes.append(text),
                "restart": lambda self, total: rec.restarted.append(total),
            },
        )()

    return notes.append, progress


def test_a_run_request_is_frozen() -> None:
    req = request()
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.axes = Axes()  # type: ignore[misc]


def test_prepare_run_refuses_before_the_store_is_touched(store_path: Path) -> None:
    req = request(shared=dataclasses.replace(QUICK, launcher="local", nodes=2), store_path=str(store_path))
    with pytest.raises(SpecError, match="the local launcher runs on this machine only"):
        prepare_run(req)
    assert not store_path.exists()


def test_prepare_run_checks_every_point_and_opens_the_store(store_path: Path) -> None:
    prepared = prepare_run(request((2, 4), store_path=str(store_path)))
    assert [(s.framework, s.model, s.batch_size, s.launcher) for s in prepared.specs] == [
        ("fake", "resnet50", 2, "local"),
        ("fake", "resnet50", 4, "local"),
    ]
    assert prepared.searched is None and prepared.store.points() == []


def test_prepare_run_takes_nothing_back_and_execute_run_does(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery file beside the store (a point an earlier writer could not store) stays untouched by the checks
    before a run; the run takes it back before its first point (#43: opening a store does not write)."""
    import json
    import uuid

    from dlbench.store.rows import point_row
    from tests.support.stores import result

    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    earlier = Store(store_path).create_run("dlbench run (earlier)")
    recovery = Path(f"{store_path}.recovery.jsonl")
    row = point_row(earlier, str(uuid.uuid4()), result(batch=3))
    recovery.write_text(json.dumps({"format": 1, "row": row, "run": None, "time": 1.0}) + "\n")
    prepared = prepare_run(request((2,), store_path=str(store_path)))
    assert prepared.store.recovered.files == () and Store(store_path, readonly=True).points() == []
    assert len(recovery.read_text().splitlines()) == 1
    outcome = execute_run(prepared)
    assert prepared.store.recovered.added == 1 and outcome.exit_code == 0
    assert sorted(p.result.spec.batch_size for p in Store(store_path, readonly=True).points()) == [2, 3]


def test_checks_before_a_run_leave_an_old_store_byte_for_byte(store_path: Path, tmp_path: Path) -> None:
    """An old-schema store (v1, rollback journal) is read, never written, by the checks before a run, a sweep and a
    dry run: the same bytes and no file beside it; the run then migrates it and stores its point (#43)."""
    store_path.parent.mkdir(parents=True)
    load_v1_sqlite(store_path)
    before = store_path.read_bytes()
    (tmp_path / "suite.yaml").write_text(SUITE)
    suite = str(tmp_path / "suite.yaml")
    prepared = prepare_run(request((2,), store_path=str(store_path)))
    assert isinstance(prepare_sweep(SweepRequest(suite_name=suite, store_path=str(store_path))), PreparedSweep)
    prepare_sweep(SweepRequest(suite_name=suite, dry_run=True, store_path=str(store_path)))
    assert store_path.read_bytes() == before and sorted(p.name for p in store_path.parent.iterdir()) == ["results.db"]
    outcome = execute_run(prepared)
    stored = Store(store_path, readonly=True)
    assert outcome.exit_code == 0 and stored.schema_version() == STORE_SCHEMA_VERSION and len(stored.points()) == 2


def test_checks_before_a_resumed_sweep_leave_its_old_store_byte_for_byte(tmp_path: Path) -> None:
    """`dlbench sweep --resume` reads the stored sweep without writing (#43): a sweep's store of the previous schema
    (stamped back at 3: v4 only nests stored specs, which these already are) in rollback-journal mode keeps its
    bytes, with no new file beside it, through the resumed sweep's checks and its dry run (a plain open made it WAL);
    the resumed sweep then migrates it and runs only the point the run lacks."""
    (tmp_path / "suite.yaml").write_text(SUITE)
    db = tmp_path / "store" / "s.db"
    first = prepare_sweep(SweepRequest(suite_name=str(tmp_path / "suite.yaml"), store_path=str(db)))
    assert isinstance(first, PreparedSweep)
    run_id = execute_sweep(first).run_id
    first.store.close()
    raw = sqlite3.connect(db, isolation_level=None)
    lost = raw.execute("SELECT id, spec_key FROM points ORDER BY id DESC LIMIT 1").fetchone()
    kept = raw.execute("SELECT id FROM points WHERE id != ?", (lost[0],)).fetchall()
    raw.execute("DELETE FROM points WHERE id = ?", (lost[0],))  # a point the run lacks, as after a kill
    raw.execute("UPDATE alembic_version SET version_num = 'v3'")
    raw.execute("UPDATE schema_meta SET value = '3' WHERE key = 'schema_version'")
    assert raw.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    raw.close()
    before, beside = db.read_bytes(), sorted(p.name for p in db.parent.iterdir())  # the store, its run claims
    resumed = prepare_sweep(SweepRequest(resume_id=run_id, store_path=str(db)))
    planned = prepare_sweep(SweepRequest(resume_id=run_id, dry_run=True, store_path=str(db)))
    assert db.read_bytes() == before and sorted(p.name for p in db.parent.iterdir()) == beside
    assert isinstance(resumed, PreparedSweep) and isinstance(planned, PlannedSweep) and resumed.run_id == run_id
    assert execute_sweep(resumed).exit_code == 0
    stored = Store(db, readonly=True)
    new = [p.result.spec.key() for p in stored.points() if (p.id,) not in kept]
    assert stored.schema_version() == STORE_SCHEMA_VERSION and len(stored.points()) == 2 and new == [lost[1]]


def test_execute_run_stores_every_point_and_returns_the_outcome(store_path: Path) -> None:
    seen: list[Recorder] = []
    notes: list[str] = []
    note, progress = hooks_into(seen, notes)
    outcome = execute_run(
        prepare_run(request((2,), store_path=str(store_path))),
        RunHooks(note=note, progress=progress),
    )  # type: ignore[arg-type]
    assert [r.status for r in outcome.results] == ["ok"] and outcome.exit_code == 0
    assert [p.result.spec.key() for p in outcome.mine()] == [outcome.results[0].spec.key()]
    assert Store(store_path).get_run(outcome.run_id).status == "done"
    assert [(r.total, len(r.started), len(r.done)) for r in seen] == [(1, 1, 1)]
    assert outcome.protocol.steps == 1 and outcome.scales() == [None]  # one device: no speedup to state
    assert notes == []  # no search, nothing to say


def test_sweep_dry_run_plans_without_writing(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(SUITE)
    db = tmp_path / "s.db"
    planned = prepare_sweep(SweepRequest(suite_name=str(tmp_path / "suite.yaml"), dry_run=True, store_path=str(db)))
    assert isinstance(planned, PlannedSweep)
    assert [(p.spec.model, p.batch_group) for p in planned.planned] == [("alexnet", "min"), ("alexnet", "fixed")]
    assert planned.found == (None, None) and not db.exists()


def test_sweep_request_errors_are_one_line_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="resumes a stored sweep with its own suite"):
        prepare_sweep(SweepRequest(suite_name="smoke", resume_id="r1", store_path=str(tmp_path / "s.db")))
    with pytest.raises(click.UsageError, match="--only takes AXIS=VALUE"):
        as_only(("nosuch=1",))  # parsed at the command's edge
    with pytest.raises(SpecError, match="--only names an unknown axis 'nosuch'"):
        prepare_sweep(SweepRequest(suite_name="caict-cpu", only={"nosuch": ("1",)}, store_path=str(tmp_path / "s.db")))


def test_execute_sweep_runs_the_matrix_into_one_run(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(SUITE)
    db = tmp_path / "s.db"
    prepared = prepare_sweep(SweepRequest(suite_name=str(tmp_path / "suite.yaml"), store_path=str(db)))
    assert isinstance(prepared, PreparedSweep)
    seen: list[Recorder] = []
    notes: list[str] = []
    note, progress = hooks_into(seen, notes)
    outcome = execute_sweep(prepared, SweepHooks(note=note, progress=progress))  # type: ignore[arg-type]
    assert [r.status for r in outcome.results] == ["ok", "ok"] and outcome.exit_code == 0
    assert {r.extra.get("batch_group") for r in outcome.results} == {"min", "fixed"}
    assert outcome.searches == {} and Store(db).get_run(outcome.run_id).status == "done"
    assert [(r.total, r.restarted, len(r.done)) for r in seen] == [(2, [2], 2)]
