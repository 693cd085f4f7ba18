"""Store faults (#14): a write the store refuses keeps the point in a recovery file and fails the run in one
line; one controller per run; dead controllers read `interrupted`; read-only commands never write; stored
metrics are checked against the raw samples; corrupt rows are one-line errors. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store, StoreError
from tests.support.stores import load_v1_sqlite, result

CliResult = tuple[int, str, str]


def break_writes(store: Store) -> None:
    """SQLite: the file may not grow (a full disk, SQLITE_FULL). PostgreSQL: a constraint every new row fails."""
    if store.target.file is not None:
        pages = store.db.exec_driver_sql("PRAGMA page_count").scalar()
        store.db.exec_driver_sql(f"PRAGMA max_page_count={pages}")
    else:
        with store.db.begin():
            store.db.exec_driver_sql("ALTER TABLE points ADD CONSTRAINT full_disk CHECK (batch_size < 0) NOT VALID")


def mend_writes(url: str) -> None:
    if url.startswith("postgresql"):
        store = Store(url, readonly=False)
        with store.db.begin():
            store.db.exec_driver_sql("ALTER TABLE points DROP CONSTRAINT full_disk")
        store.close()


def test_a_failed_write_keeps_the_point_and_fails_the_run(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    store = Store(store_url)
    run = store.create_run("dlbench sweep x", kind="sweep")
    store.add_point(run, result(batch=1))
    break_writes(store)
    while True:  # fill the last free pages (SQLite); the first insert fails at once on PostgreSQL
        try:
            store.add_point(run, result(batch=2))
        except StoreError as exc:
            message = str(exc)
            break
    assert "\n" not in message and "was kept in" in message and "dlbench results --recover" in message
    [path] = [p for p in store.recovery_paths if p.exists()]
    assert str(path) in message
    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["row"]["batch_size"] == 2
    if store_url.startswith("postgresql"):
        assert Store(store_url, readonly=True).get_run(run).status == "failed"
        assert "store write failed" in (Store(store_url, readonly=True).get_run(run).reason or "")
    stored_before = len(Store(store_url, readonly=True).points([run]))
    store.close()
    mend_writes(store_url)
    assert Store(store_url).recovered.added == 0  # a plain writer's open takes nothing back: only when asked
    assert len(Store(store_url, readonly=True).points([run])) == stored_before
    again = Store.open(store_url, recover=True)  # a writer about to store points takes back what the file holds
    assert (again.recovered.added, again.recovered.present) == (1, 0)
    keys = again.done_keys(run)  # what `dlbench sweep --resume` counts as done
    assert result(batch=2).spec.key() in keys
    assert len(again.points([run])) == stored_before + 1
    assert Store.open(store_url, recover=True).recovered.added == 0  # idempotent: a second read adds nothing
    assert len(Store(store_url, readonly=True).points([run])) == stored_before + 1


def test_an_integer_the_database_cannot_hold_is_a_store_error(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    store = Store(store_url)
    run = store.create_run("dlbench run -b 99999999999999999999")
    huge = result()
    object.__setattr__(huge.spec, "batch_size", 99999999999999999999)  # past any validation: the store's own guard
    with pytest.raises(StoreError, match="was kept in") as exc:
        store.add_point(run, huge)
    assert "\n" not in str(exc.value)
    assert Store(store_url, readonly=True).get_run(run).status == "failed"
    again = Store.open(
        store_url, recover=True
    ).recovered  # it can never be stored or read: quarantined beside the file, not lost (#25)
    assert (again.added, again.failed, again.quarantined) == (0, 0, 1)
    [kept] = list(again.files[0].parent.glob("*.quarantine.jsonl"))
    assert "99999999999999999999" in kept.read_text()


def test_a_run_has_one_controller(store_url: str) -> None:
    store = Store(store_url)
    run = store.create_run("dlbench sweep x", kind="sweep")
    other = Store(store_url)
    with store.claim_run(run):
        with pytest.raises(StoreError, match=f"run {run} is being resumed by another dlbench \\(pid {os.getpid()}"):
            with other.claim_run(run):
                pass
    with other.claim_run(run):  # released: the next controller may take it
        pass


def test_a_claim_held_by_another_process_dies_with_it(store_url: str) -> None:
    run = Store(store_url).create_run("dlbench sweep x", kind="sweep")
    code = (
        "import sys, time; from dlbench.store.store import Store; s = Store(sys.argv[1]); "
        "c = s.claim_run(sys.argv[2]); c.__enter__(); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, store_url, run], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=f"pid {proc.pid}"):
            with Store(store_url).claim_run(run):
                pass
        assert Store(store_url, readonly=True).get_run(run).status == "running"  # its controller is alive
    finally:
        proc.kill()
        proc.wait()
    assert Store(store_url, readonly=True).get_run(run).status == "interrupted"  # killed: shown as such
    with Store(store_url).claim_run(run):  # and the lock went with it
        pass


def test_a_controller_on_another_host_is_not_judged(store_url: str) -> None:
    store = Store(store_url)
    run = store.create_run("dlbench run")
    with store.transaction(write=True) as c:
        c.exec_driver_sql(f"UPDATE runs SET host='elsewhere', pid=1 WHERE id='{run}'")
    assert store.get_run(run).status == "running"


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_only_opens_never_write_create_or_migrate(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    foreign = tmp_path / "other.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (x TEXT)")
    db.commit()
    db.close()
    before = file_digest(foreign)
    for readonly in (True, False):
        with pytest.raises(StoreError, match="is not a dlbench store"):
            Store(foreign, readonly=readonly)
    code, _, err = cli("results", "--store", str(foreign))
    assert code == 2 and "not a dlbench store" in err and err.count("\n") == 1
    assert file_digest(foreign) == before and not Path(f"{foreign}-wal").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not SQLite at all" * 100)
    code, _, err = cli("report", "--store", str(junk))
    assert code == 2 and "not a dlbench store" in err
    old = tmp_path / "old.db"
    load_v1_sqlite(old)
    before = file_digest(old)
    code, out, err = cli("results", "--store", str(old), "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["spec"]["model"] == "resnet50"  # read through the migration, in memory
    assert file_digest(old) == before and not Path(f"{old}-wal").exists()
    assert sqlite3.connect(old).execute("SELECT value FROM schema_meta").fetchone()[0] == "1"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a read-only mount needs root and unshare (a private mount namespace)",
)
def test_results_and_report_work_on_a_read_only_file_system(tmp_path: Path) -> None:
    src = tmp_path / "rw" / "results.db"
    store = Store(src)
    run = store.create_run("dlbench run")
    store.add_point(run, result())
    store.finish_run(run, "done")
    store.close()
    ro = tmp_path / "ro"
    ro.mkdir()
    script = (
        f"mount -t tmpfs tmpfs {ro} && cp {src} {ro}/ && mount -o remount,ro {ro} && "
        f"touch {ro}/probe 2>/dev/null && echo WRITABLE; "
        f"{sys.executable} -m dlbench results --store {ro}/results.db --format csv && "
        f"{sys.executable} -m dlbench report --store {ro}/results.db -o {tmp_path}/r.html"
    )
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if "Operation not permitted" in proc.stderr and "mount" in proc.stderr:
        pytest.skip(f"no private mounts here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "WRITABLE" not in proc.stdout and "resnet50" in proc.stdout
    assert (tmp_path / "r.html").stat().st_size > 0


def test_verify_catches_a_tampered_throughput(store_url: str, cli: Callable[..., CliResult]) -> None:
    store = Store(store_url)
    run = store.create_run("dlbench run")
    store.add_point(run, result())
    store.add_point(run, result("oom"))
    code, out, err = cli("results", run, "--verify", "--store", store_url)
    assert code == 0, err
    assert "verified 2 point(s)" in out and "0 mismatch" in out
    with store.transaction(write=True) as c:
        text = c.exec_driver_sql("SELECT metrics_json FROM points WHERE metrics_json IS NOT NULL").scalar_one()
        m = json.loads(text)
        m["throughput"] *= 1.1
        c.exec_driver_sql(
            "UPDATE points SET metrics_json=%s WHERE metrics_json IS NOT NULL"
            if store_url.startswith("postgresql")
            else "UPDATE points SET metrics_json=? WHERE metrics_json IS NOT NULL",
            (json.dumps(m),),
        )
    code, out, err = cli("results", run, "--verify", "--store", store_url)
    assert code == 1 and "1 mismatch" in out
    assert "MISMATCH" in err and "throughput: stored" in err


@pytest.mark.parametrize(
    "column,value,named",
    [
        ("spec_json", "{not json", "corrupt spec_json"),
        ("ranks_json", '[{"rank": 0', "corrupt ranks_json"),
        ("meta_json", "[1, 2", "corrupt meta_json"),
    ],
)
def test_corrupt_rows_are_one_line_errors(
    store_url: str, cli: Callable[..., CliResult], column: str, value: str, named: str
) -> None:
    store = Store(store_url)
    run = store.create_run("dlbench run")
    store.add_point(run, result())
    table = "runs" if column == "meta_json" else "points"
    with store.transaction(write=True) as c:
        c.exec_driver_sql(
            f"UPDATE {table} SET {column}=%s"
            if store_url.startswith("postgresql")
            else f"UPDATE {table} SET {column}=?",
            (value,),
        )
    code, _, err = cli("results", "--store", store_url)
    assert code == 2 and named in err and run in err and err.count("\n") == 1


def test_recover_command_reports_and_is_idempotent(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    store = Store(db)
    run = store.create_run("dlbench run")
    break_writes(store)
    with pytest.raises(StoreError):
        for batch in range(1, 1000):
            store.add_point(run, result(batch=batch))
    store.close()
    code, out, err = cli("results", "--recover", "--store", str(db))
    assert code == 0, err
    assert "recovered 1 point(s)" in out and "0 were already there" in out
    code, out, err = cli("results", "--recover", "--store", str(db))
    assert code == 0 and "recovered 0 point(s)" in out and "1 were already there" in out
    code, out, _ = cli("results", "--recover", "--store", str(tmp_path / "fresh.db"))
    assert code == 0 and "no recovery file" in out
