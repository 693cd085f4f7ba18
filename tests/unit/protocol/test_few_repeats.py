"""No false precision: fewer than 3 repeats give 'n=1' or 'n=2', no interval, no CV and 'noisy' unknown, in the
table, JSON and CSV, also for points stored before; three repeats keep their interval."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.analysis.verify import verify
from dlbench.report.digits import fmt_rate
from dlbench.report.export import to_csv, to_json
from dlbench.report.table import points_table
from dlbench.store.store import Store, StoredPoint
from tests.support.reports import make_point, one_repeat

CliResult = tuple[int, str, str]


@pytest.mark.parametrize("repeats", [1, 2])
def test_fewer_than_three_repeats_have_no_interval_and_unknown_noise(repeats: int) -> None:
    r = one_repeat(make_point("torch"), repeats)
    m = r.metrics
    assert m is not None and m.repeats == repeats and not m.has_spread
    assert (m.ci_low, m.ci_high, m.cv, m.noisy) == (None, None, None, None)
    table = Console(file=io.StringIO(), width=200)
    table.print(points_table([r], columns=("framework", "throughput", "cv", "status")))
    text = table.file.getvalue()  # type: ignore[attr-defined]
    assert f"{fmt_rate(m.throughput)} n={repeats}" in text and "±" not in text
    p = StoredPoint(1, "run1", r, "uid-1")
    [doc] = json.loads(to_json([p]))
    assert doc["metrics"]["ci_low"] is None and doc["metrics"]["cv"] is None and doc["metrics"]["noisy"] is None
    row = next(csv.DictReader(io.StringIO(to_csv([p]))))
    assert (row["ci_low"], row["ci_high"], row["cv"], row["noisy"]) == ("", "", "", "")
    # the report's 'n=1' badge: test_report_configs.test_few_repeats_are_marked_in_the_report


def test_three_repeats_keep_their_interval() -> None:
    m = make_point("torch").metrics
    assert m is not None and m.has_spread and m.noisy is False and m.ci_low is not None and m.cv is not None


def test_a_one_repeat_point_stored_before_reads_without_a_spread(tmp_path: Path) -> None:
    """Older stores kept ci_low = ci_high = throughput, cv 0 and noisy false for one repeat: read them as none,
    and --verify does not call that a mismatch."""
    db = tmp_path / "s.db"
    store = Store(db)
    run = store.create_run("dlbench run --repeats 1")
    r = one_repeat(make_point("torch"))
    store.add_point(run, r)
    store.finish_run(run, "done")
    store.close()
    tp = r.metrics.throughput  # type: ignore[union-attr]
    con = sqlite3.connect(db)
    [(raw,)] = con.execute("SELECT metrics_json FROM points").fetchall()
    old = {**json.loads(raw), "ci_low": tp, "ci_high": tp, "cv": 0.0, "noisy": False}
    con.execute("UPDATE points SET metrics_json = ?", (json.dumps(old),))
    con.commit()
    con.close()
    again = Store(db, readonly=True)
    [p] = again.points()
    m = p.result.metrics
    assert m is not None and (m.ci_low, m.ci_high, m.cv, m.noisy) == (None, None, None, None)
    assert verify(again.points(), again.stored_rows([run])) == []
