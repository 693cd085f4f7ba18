"""Tables that fit the terminal: nothing that tells points apart, nor the throughput, is cut at 80 or 140 columns;
columns on demand; `run --format json|csv`."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.analysis.scaling import scaled
from dlbench.records import PointResult
from dlbench.report.export import CSV_COLUMNS
from dlbench.report.table import COLUMNS, points_table, runs_table
from dlbench.store.store import RunRecord, Store, StoredPoint
from tests.support.reports import make_point, one_repeat

CliResult = tuple[int, str, str]


def _row_set() -> list[PointResult]:
    wd = make_point("torch", model="wide_deep", batch=16384, step_s=0.0001)
    wd = dataclasses.replace(wd, spec=dataclasses.replace(wd.spec, case_params=(("sparse", 0), ("vocab", 3_200_000))))
    face = make_point("torch", model="face", batch=4, per_node=2)
    face = dataclasses.replace(
        face,
        spec=dataclasses.replace(face.spec, case_params=(("classes", 98_000), ("model_parallel", 1), ("sample", 10))),
    )
    return [
        make_point("torch"),
        one_repeat(make_point("tf", model="alexnet", batch=128, step_s=0.0001)),
        wd,
        face,
        make_point("tf", status="oom", error="ResourceExhaustedError: OOM when allocating tensor " * 4),
    ]


@pytest.mark.parametrize("width", [80, 140])
def test_the_compact_table_cuts_no_identifying_cell_nor_the_throughput(width: int) -> None:
    rows = _row_set()
    console = Console(file=io.StringIO(), width=width)
    console.print(points_table(rows, title="run 1"))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    words = text.split()
    for r in rows:
        wanted = [r.spec.framework, r.spec.model, str(r.spec.batch_size), r.spec.scale, "samples/s"]
        wanted += [
            f"{k}={v}"
            for k, v in (
                ("vocab", "3.2M"),
                ("sparse", "0"),
                ("classes", "98K"),
                ("model_parallel", "1"),
                ("sample", "10"),
            )
            if k in r.spec.params
        ]
        wanted += COLUMNS["throughput"].cell(_cell(r)).split()
        assert all(w in words for w in wanted), (wanted, text)


@pytest.mark.parametrize("width", [80, 140])
def test_strategies_get_a_column_and_the_status_is_never_pushed_out(width: int) -> None:
    """Points that differ only in their strategy (a strategies sweep) read apart, and where the terminal cannot
    hold the speedup beside them it is left out, said under the table, instead of rich cutting the status off."""
    base = make_point("tf", per_node=1)
    rows = [base] + [
        dataclasses.replace(r, spec=dataclasses.replace(r.spec, strategy=name))
        for r, name in (
            (make_point("tf", per_node=2, seed=i), name) for i, name in enumerate(("ps-cpu", "replicated-pscpu"))
        )
    ]
    stored = [StoredPoint(i + 1, "run1", r) for i, r in enumerate(rows)]
    console = Console(file=io.StringIO(), width=width)
    console.print(points_table(rows, title="run 1", scaled=[scaled(stored, r) for r in rows], width=width))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
    head = next(line for line in text.splitlines() if line.startswith("framework")).split()
    assert "strategy" in head and head[-1] == "status"
    assert "ps-cpu" in text.split() and "replicated-pscpu" in text.split()
    assert ("speedup" in head) == (width == 140)
    assert ("Not shown at this width: speedup" in text) == (width == 80)
    plain = Console(file=io.StringIO(), width=width)  # the defaults (synthetic data, no strategy) are not said
    plain.print(points_table([make_point("torch"), make_point("torch", model="alexnet")], title="run 2"))
    assert plain.file.getvalue().splitlines()[0].split() == ["run", "2", "·", "fp32", "·", "1n1c"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("width", [80, 140])
def test_the_runs_table_keeps_the_run_id_and_every_word_of_the_command(width: int) -> None:
    command = (
        "dlbench run -m face -b 4 --input-size 64 --scale 1n2c --strategy ddp --memory-limit 1536MiB "
        "--device cpu --param classes=max --param model_parallel=1 --store /tmp/some/where/results.db"
    )
    run = RunRecord("20261125-012002-1aa72daa", 1.79e9, "run", command, "done", {}, 1)
    console = Console(file=io.StringIO(), width=width)
    console.print(runs_table([run]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width and "…" not in text and run.id in text.split()
    at = next(line for line in lines if line.startswith("run ")).index("command")
    rows = [line for line in lines[3:] if not line.startswith("Not shown at this width")]  # the note under it
    shown = "".join(line[at:].replace(" ", "") for line in rows)  # the command column (a long path folded)
    assert shown == command.replace(" ", "")


def _cell(r: PointResult) -> object:
    from dlbench.report.table import PointCell

    return PointCell(r, None, lambda: None)  # type: ignore[arg-type,return-value]


def test_columns_on_demand(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, out, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "--input-size",
        "32",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--store",
        str(store_path),
        "--columns",
        "framework,throughput,step,memory",
    )
    assert code == 0, err
    head = next(line for line in out.splitlines() if "framework" in line)
    assert head.split() == ["framework", "samples/s", "median", "step", "peak", "memory"]
    assert "n=1: fewer than 3 repeats give no CI and no CV" in out
    code, out, _ = cli("results", "--store", str(store_path), "--wide")
    assert code == 0 and "MFU" in out and "CV" in out and "threads" in out


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_run_prints_json_and_csv_with_id_time_host_and_commit(
    cli: Callable[..., CliResult], store_path: Path, fmt: str
) -> None:
    code, out, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "--input-size",
        "32",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--format",
        fmt,
        "--store",
        str(store_path),
    )
    assert code == 0, err
    [p] = Store(store_path, readonly=True).points()
    if fmt == "json":
        [doc] = json.loads(out)
    else:
        assert list(csv.DictReader(io.StringIO(out)).fieldnames or []) == list(CSV_COLUMNS)
        [doc] = list(csv.DictReader(io.StringIO(out)))
    assert str(doc["point_id"]) == str(p.id) and doc["point_uid"] == p.uid
    assert str(doc["measured_at"]).startswith("20") and "T" in str(doc["measured_at"])
    assert doc["host"] == p.result.env.descriptive["hostname"]
    assert doc["commit"] == (p.result.env.descriptive.get("git_commit") or (None if fmt == "json" else ""))
