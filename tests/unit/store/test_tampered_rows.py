"""Readers tolerate any row (#25): a metric of the wrong type or non-finite shows as `invalid` with the point's id
(`results`, `report`), and `--verify` says why; `--verify` also covers the status, the batch-size column and
fields no dlbench writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store
from tests.support.stores import result

CliResult = tuple[int, str, str]


def one_point_store(tmp_path: Path) -> tuple[Path, str, str]:
    db = tmp_path / "s.db"
    store = Store(db)
    run = store.create_run("dlbench run")
    store.add_point(run, result())
    store.finish_run(run, "done")
    store.close()
    uid = sqlite3.connect(db).execute("SELECT uid FROM points").fetchone()[0]
    return db, run, uid


def tamper(db: Path, sql: str, *args: object) -> None:
    con = sqlite3.connect(db)
    con.execute(sql, args)
    con.commit()
    con.close()


def set_metric(db: Path, key: str, value: object) -> None:
    con = sqlite3.connect(db)
    m = json.loads(con.execute("SELECT metrics_json FROM points").fetchone()[0])
    m[key] = value
    con.execute("UPDATE points SET metrics_json=?", (json.dumps(m),))
    con.commit()
    con.close()


@pytest.mark.parametrize("value, why", [("1234.5", "throughput is a str"), (float("inf"), "throughput is inf")])
def test_a_tampered_metric_reads_invalid_everywhere(
    tmp_path: Path, cli: Callable[..., CliResult], value: object, why: str
) -> None:
    db, run, uid = one_point_store(tmp_path)
    set_metric(db, "throughput", value)
    code, out, err = cli("results", run, "--store", str(db))
    assert code == 0, err
    assert "invalid" in out and uid in "".join(out.split())  # the table's footnote names the point
    for fmt in ("json", "csv"):
        code, out, err = cli("results", run, "--format", fmt, "--store", str(db))
        assert code == 0 and "invalid" in out and uid in out, err
    code, _, err = cli("report", run, "-o", str(tmp_path / "r.html"), "--store", str(db))
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "invalid" in page and uid in page
    code, out, err = cli("results", run, "--verify", "--store", str(db))
    assert code == 1 and "1 mismatch" in out and why in err and uid in err


@pytest.mark.parametrize(
    "change, why",
    [
        ("UPDATE points SET status='oom'", "a changed status"),
        ("UPDATE points SET status='great'", "status 'great' is not one dlbench writes"),
        ("UPDATE points SET batch_size=512", "the batch_size column reads 512"),
        ("metrics:bonus", "metrics field 'bonus' is not one dlbench writes"),
        ("ranks:bonus", "rank field 'bonus' is not one dlbench writes"),
    ],
)
def test_verify_sees_status_batch_and_added_fields(
    tmp_path: Path, cli: Callable[..., CliResult], change: str, why: str
) -> None:
    db, run, _ = one_point_store(tmp_path)
    if change == "metrics:bonus":
        set_metric(db, "bonus", 1)
    elif change == "ranks:bonus":
        con = sqlite3.connect(db)
        ranks = json.loads(con.execute("SELECT ranks_json FROM points").fetchone()[0])
        ranks[0]["bonus"] = 1
        con.execute("UPDATE points SET ranks_json=?", (json.dumps(ranks),))
        con.commit()
        con.close()
    else:
        tamper(db, change)
    code, out, err = cli("results", run, "--verify", "--store", str(db))
    assert code == 1 and "1 mismatch" in out and why in err, (out, err)
    code, _, err = cli("results", run, "--store", str(db))
    assert code == 0, err  # readers never crash on it


def test_raw_samples_of_the_wrong_shape_read_invalid(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    db, run, uid = one_point_store(tmp_path)
    tamper(db, "UPDATE points SET ranks_json=?", '[{"rank": 0}]')  # a rank without its repeats
    code, out, err = cli("results", run, "--store", str(db))
    assert code == 0 and "invalid" in out and uid in "".join(out.split()), err
