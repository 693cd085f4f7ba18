"""A team store (#16): concurrent writers, resume after kill -9, one controller per resumed run, and push/pull
that copy runs idempotently. Every test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from dlbench.store.gather import copy_runs
from dlbench.store.store import Store
from tests.support.paths import REPO
from tests.support.stores import result

CliResult = tuple[int, str, str]
WRITERS, EACH = 4, 20

WRITER = """
import sys
from dlbench.store.store import Store
sys.path.insert(0, sys.argv[3])
from tests.support.stores import result
store = Store(sys.argv[1])
run = store.create_run(f"writer {sys.argv[2]}")
for i in range(int(sys.argv[2])):
    store.add_point(run, result(batch=i + 1))
store.finish_run(run, "done")
"""


def test_concurrent_writers_lose_nothing(store_url: str) -> None:
    Store(store_url).close()  # created (and migrated) once; the writers race on points, not on the schema
    here = str(REPO)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, store_url, str(EACH), here], stderr=subprocess.PIPE, text=True)
        for _ in range(WRITERS)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    store = Store(store_url, readonly=True)
    points = store.points()
    assert len(points) == WRITERS * EACH
    assert len({p.uid for p in points}) == len({p.id for p in points}) == WRITERS * EACH
    runs = store.runs()
    assert len(runs) == WRITERS and all(r.status == "done" and r.points == EACH for r in runs)


def test_concurrent_first_opens_create_the_schema_once(store_url: str) -> None:
    here = str(REPO)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, store_url, "3", here], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert len(Store(store_url, readonly=True).points()) == 9


def test_push_and_pull_are_idempotent(store_url: str, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    machine_a, machine_b = tmp_path / "a.db", tmp_path / "b.db"
    ids = []
    for db, batches in ((machine_a, (1, 2, 3)), (machine_b, (4, 5))):
        store = Store(db)
        run = store.create_run("dlbench run")
        for b in batches:
            store.add_point(run, result(batch=b))
        store.finish_run(run, "done")
        ids.append(run)
    half = Store(machine_a).create_run("dlbench sweep (still running)", kind="sweep")
    code, out, err = cli("store", "push", "--all", "--to", store_url, "--store", str(machine_a))
    assert code == 0, err
    assert "2 new run(s)" in out and "3 new point(s), 0 already there" in out
    code, out, _ = cli("store", "push", "--all", "--to", store_url, "--store", str(machine_a))
    assert code == 0 and "0 new run(s), 0 run status update(s), 0 new point(s), 3 already there" in out
    code, out, _ = cli("store", "push", ids[1], "--to", store_url, "--store", str(machine_b))
    assert code == 0 and "2 new point(s)" in out
    shared = Store(store_url, readonly=True)
    assert len(shared.points()) == 5 and len(shared.runs()) == 3
    local = Store(machine_a)
    local.add_point(half, result(batch=9))
    local.finish_run(half, "done")
    c = copy_runs(local, Store(store_url), [half])  # the sweep finished: its status and new point follow
    assert (c.runs_added, c.runs_updated, c.points_added) == (0, 1, 1)
    assert Store(store_url, readonly=True).get_run(half).status == "done"
    dead = Store(machine_a).create_run("dlbench sweep (killed)", kind="sweep")
    with Store(machine_a).transaction(write=True) as conn:  # as if its controller had died: a pid that is gone
        conn.exec_driver_sql(f"UPDATE runs SET pid=pid+10000000 WHERE id='{dead}'")
    copy_runs(Store(machine_a), Store(store_url), [dead])
    assert Store(store_url, readonly=True).get_run(dead).status == "interrupted"  # for readers on any host
    gathered = tmp_path / "gathered.db"
    for _ in range(2):
        code, out, err = cli("store", "pull", "--all", "--from", store_url, "--store", str(gathered))
        assert code == 0, err
    assert "0 new point(s), 6 already there" in out
    assert len(Store(gathered, readonly=True).runs()) == 4
    mine = {p.uid: p.result for p in Store(gathered, readonly=True).points()}
    theirs = {p.uid: p.result for p in Store(store_url, readonly=True).points()}
    assert mine == theirs and len(mine) == 6
    password = sa.make_url(store_url).password if "://" in store_url else None
    if password:
        assert str(password) not in out and ":***@" in out  # the URL is shown, its password never


SUITE = """\
name: team-sweep
device: cpu
protocol: {preset: quick, warmup: 1, steps: 3, repeats: 2}
timeout: 60
axes:
  framework: fake
  model: [resnet50, alexnet, vgg16, bert_base]
  batch: [1, 2, 3]
"""


def sweep_points(url: str) -> list[tuple[str, int]]:
    try:
        store = Store(url, readonly=True)
    except Exception:  # not created yet
        return []
    try:
        runs = [r.id for r in store.runs() if r.kind == "sweep"]
        return [(p.result.spec.model, p.result.spec.batch_size) for p in store.points(runs)]
    finally:
        store.close()


def start_sweep(args: list[str], url: str, step_s: float = 0.05) -> subprocess.Popen[str]:
    env = {**os.environ, "DLBENCH_FAKE": f"sleep:{step_s}"}
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench", "sweep", *args, "--store", url],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_resume_after_kill_9_and_one_resumer_at_a_time(store_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    proc = start_sweep([str(suite)], store_url)
    deadline = time.monotonic() + 240
    while len(sweep_points(store_url)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    before = sweep_points(store_url)
    assert 2 <= len(before) < 12
    [run] = [r for r in Store(store_url, readonly=True).runs() if r.kind == "sweep"]
    assert run.status == "interrupted"  # stored as running; its controller is gone
    first = start_sweep(["--resume", run.id], store_url, step_s=0.1)  # 9+ points of >= 0.8 s and a worker start each
    while len(sweep_points(store_url)) == len(before):  # it holds the claim once it stores a point
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.stderr else ""
        time.sleep(0.2)
    second = start_sweep(["--resume", run.id], store_url)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert f"run {run.id} is being resumed by another dlbench (pid {first.pid}" in err and err.count("\n") == 1
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    after = sweep_points(store_url)
    assert after[: len(before)] == before and len(after) == len(set(after)) == 12  # none twice, none missing
    assert Store(store_url, readonly=True).get_run(run.id).status == "done"
