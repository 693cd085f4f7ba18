"""Issue 24 outside the report: no false precision (fewer than 3 repeats give 'n=1', no interval, no CV and
'noisy' unknown, in the table, JSON and CSV, also for points stored before), tables that fit the terminal
(nothing that tells points apart, nor the throughput, is cut at 80 or 140 columns), `run --format`, and the
smaller CLI items: --device cuda without a GPU, input sizes the architecture refuses, no 1-device baseline for
a model-parallel maximum."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from test_report import make_point

from dlbench.cases import get_case
from dlbench.cases.inputs import min_input_size
from dlbench.protocol.stats import summarize
from dlbench.report.export import CSV_COLUMNS, to_csv, to_json
from dlbench.report.table import COLUMNS, points_table, runs_table
from dlbench.analysis.scaling import scaled
from dlbench.records import PointResult
from dlbench.store.store import RunRecord, Store, StoredPoint
from dlbench.analysis.verify import verify
from dlbench.spec import SpecError

CliResult = tuple[int, str, str]


def one_repeat(r: PointResult, repeats: int = 1) -> PointResult:
    """The point as measured with --repeats N (its first N repeats), metrics derived by the real statistics."""
    spec = dataclasses.replace(r.spec, protocol=dataclasses.replace(r.spec.protocol, repeats=repeats))
    ranks = tuple(dataclasses.replace(k, repeats=k.repeats[:repeats]) for k in r.ranks)
    return dataclasses.replace(r, spec=spec, ranks=ranks, metrics=summarize(spec, ranks))


# -- item 2: honest uncertainty -------------------------------------------------------------------------------

@pytest.mark.parametrize("repeats", [1, 2])
def test_fewer_than_three_repeats_have_no_interval_and_unknown_noise(repeats: int) -> None:
    r = one_repeat(make_point("torch"), repeats)
    m = r.metrics
    assert m is not None and m.repeats == repeats and not m.has_spread
    assert (m.ci_low, m.ci_high, m.cv, m.noisy) == (None, None, None, None)
    table = Console(file=io.StringIO(), width=200)
    table.print(points_table([r], columns=("framework", "throughput", "cv", "status")))
    text = table.file.getvalue()  # type: ignore[attr-defined]
    assert f"{m.throughput:,.1f} n={repeats}" in text and "±" not in text
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


# -- item 8: tables for people ----------------------------------------------------------------------------------

def _row_set() -> list[PointResult]:
    wd = make_point("torch", model="wide_deep", batch=16384, step_s=0.0001)
    wd = dataclasses.replace(wd, spec=dataclasses.replace(wd.spec, case_params=(("sparse", 0), ("vocab", 3_200_000))))
    face = make_point("torch", model="face", batch=4, per_node=2)
    face = dataclasses.replace(face, spec=dataclasses.replace(
        face.spec, case_params=(("classes", 98_000), ("model_parallel", 1), ("sample", 10))))
    return [make_point("torch"), one_repeat(make_point("tf", model="alexnet", batch=128, step_s=0.0001)), wd, face,
            make_point("tf", status="oom", error="ResourceExhaustedError: OOM when allocating tensor " * 4)]


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
        wanted += [f"{k}={v}" for k, v in (("vocab", "3.2M"), ("sparse", "0"), ("classes", "98K"),
                                             ("model_parallel", "1"), ("sample", "10")) if k in r.spec.params]
        wanted += COLUMNS["throughput"].cell(_cell(r)).split()
        assert all(w in words for w in wanted), (wanted, text)


@pytest.mark.parametrize("width", [80, 140])
def test_strategies_get_a_column_and_the_status_is_never_pushed_out(width: int) -> None:
    """Points that differ only in their strategy (a strategies sweep) read apart, and where the terminal cannot
    hold the speedup beside them it is left out, said under the table, instead of rich cutting the status off."""
    base = make_point("tf", per_node=1)
    rows = [base] + [dataclasses.replace(r, spec=dataclasses.replace(r.spec, strategy=name))
                     for r, name in ((make_point("tf", per_node=2, seed=i), name)
                                     for i, name in enumerate(("ps-cpu", "replicated-pscpu")))]
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
    command = ("dlbench run -m face -b 4 --input-size 64 --scale 1n2c --strategy ddp --memory-limit 1536MiB "
               "--device cpu --param classes=max --param model_parallel=1 --store /tmp/some/where/results.db")
    run = RunRecord("20261125-012002-1aa72daa", 1.79e9, "run", command, "done", {}, 1)
    console = Console(file=io.StringIO(), width=width)
    console.print(runs_table([run]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width and "…" not in text and run.id in text.split()
    at = next(line for line in lines if line.startswith("run ")).index("command")
    shown = "".join(line[at:].replace(" ", "") for line in lines[3:])  # the command column (a long path folded)
    assert shown == command.replace(" ", "")


def _cell(r: PointResult) -> object:
    from dlbench.report.table import PointCell

    return PointCell(r, None, lambda: None)  # type: ignore[arg-type,return-value]


def test_columns_on_demand(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, out, err = cli("run", "-f", "fake", "-m", "resnet50", "--input-size", "32", "--warmup", "0", "--steps", "1",
                         "--repeats", "1", "--device", "cpu", "--store", str(store_path), "--columns",
                         "framework,throughput,step,memory")
    assert code == 0, err
    head = next(line for line in out.splitlines() if "framework" in line)
    assert head.split() == ["framework", "samples/s", "median", "step", "peak", "memory"]
    assert "n=1: fewer than 3 repeats give no CI and no CV" in out
    code, out, _ = cli("results", "--store", str(store_path), "--wide")
    assert code == 0 and "MFU" in out and "CV" in out and "threads" in out


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_run_prints_json_and_csv_with_id_time_host_and_commit(cli: Callable[..., CliResult], store_path: Path,
                                                              fmt: str) -> None:
    code, out, err = cli("run", "-f", "fake", "-m", "resnet50", "--input-size", "32", "--warmup", "0", "--steps", "1",
                         "--repeats", "1", "--device", "cpu", "--format", fmt, "--store", str(store_path))
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


# -- item 9: the smaller items ------------------------------------------------------------------------------------

def test_cuda_without_a_gpu_is_bad_input(cli: Callable[..., CliResult], store_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dlbench.runapi.options.cuda_available", lambda: False)
    code, out, err = cli("run", "-f", "fake", "-m", "resnet50", "--device", "cuda", "--store", str(store_path))
    assert code == 2 and "--device cuda" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1
    assert not store_path.exists() and out == ""


@pytest.mark.parametrize(("model", "least"), [("resnet50", 32), ("face", 32), ("vgg16", 32), ("alexnet", 63),
                                              ("inception_v3", 75), ("bert_base", 2), ("gpt2_small", 1)])
def test_each_case_s_smallest_input(model: str, least: int) -> None:
    case = get_case(model)
    assert min_input_size(case) == least
    case.check_input_size(least)
    if least > 1:
        with pytest.raises(SpecError, match=f"too small for {case.name}: its architecture takes at least {least}"):
            case.check_input_size(least - 1)


@pytest.mark.parametrize("mode", [("model_parallel=1",), ("model_parallel=1", "sample=10"), ()])
def test_a_model_parallel_maximum_gets_no_one_device_baseline(cli: Callable[..., CliResult], store_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              mode: tuple[str, ...]) -> None:
    """The face README commands: the search (stubbed here) finds a 1n2c maximum; one device must run out of memory
    at a model-parallel or Partial FC maximum, so no baseline is measured for it (the full mode keeps its own)."""
    import dlbench.runapi.run as run_cli

    def found(store: object, specs: list, name: str, launchers: object,  # type: ignore[type-arg]
              note: object = None) -> tuple[list, list, dict]:  # type: ignore[type-arg]
        at = [dataclasses.replace(s, case_params=tuple(sorted({**s.params, name: 98_000}.items()))) for s in specs]
        return at, [], {s.key(): {"max_param": {"name": name, "max": 98_000}} for s in at}

    ran: list[object] = []

    def run_points(store: object, run_id: str, specs: list, *a: object, **k: object) -> list[PointResult]:  # type: ignore[type-arg]
        ran.extend(specs)
        return [make_point("fake", model="face", batch=4)]

    monkeypatch.setattr(run_cli, "search_param", found)
    monkeypatch.setattr(run_cli, "run_points", run_points)
    args = [a for m in mode for a in ("--param", m)]
    cli("run", "-f", "fake", "-m", "face", "-b", "4", "--scale", "1n2c", "--strategy", "ddp", "--param", "classes=max",
        *args, "--memory-limit", "1GiB", "--device", "cpu", "--store", str(store_path))
    scales = sorted(s.scale for s in ran)  # type: ignore[attr-defined]
    assert scales == (["1n2c"] if mode else ["1n1c", "1n2c"])

