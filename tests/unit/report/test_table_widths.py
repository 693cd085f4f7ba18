"""The width rule (report/fit.py) on every command's table at 60, 80, 120 and 200 columns: every number and every
value that tells rows apart appears whole (a word of the output), nothing is cut with '…', no line is wider than
the terminal. Stores are written here from fixture points (long case parameters, several configurations, one
point alone), no training."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from dlbench import reference
from dlbench.cases import all_cases
from dlbench.cli.progress import RunProgress
from dlbench.records import PointResult
from dlbench.report.digits import fmt_rate
from dlbench.report.fit import Col, fit
from dlbench.report.listing import cases_table, frameworks_table
from dlbench.report.table import COLUMNS, PointCell, fmt_case_params
from dlbench.store.store import Store
from tests.support.reports import make_point

CliResult = tuple[int, str, str]
WIDTHS = (60, 80, 120, 200)


def _long(r: PointResult, **params: int) -> PointResult:
    return dataclasses.replace(r, spec=dataclasses.replace(r.spec, case_params=tuple(sorted(params.items()))))


def fixture_points(slow: float = 1.0) -> list[PointResult]:
    """Several configurations, long case parameters, a 2-device point, a failure."""
    return [
        make_point("torch", step_s=0.010 * slow),
        make_point("tf", model="alexnet", batch=128, step_s=0.0001 * slow, seed=2),
        _long(
            make_point("torch", model="wide_deep", batch=16384, step_s=0.0001 * slow, seed=3), sparse=0, vocab=3_200_000
        ),
        _long(
            make_point("torch", model="face", batch=4, per_node=2, step_s=0.01 * slow, seed=4),
            classes=98_000,
            model_parallel=1,
            sample=10,
        ),
        make_point("tf", status="oom", error="ResourceExhaustedError: OOM when allocating tensor " * 3),
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Run A and run B (10% slower) of the same configurations, and a run of one point."""
    path = tmp_path_factory.mktemp("widths") / "s.db"
    s = Store(path)
    ids = []
    for _slow, points in ((1.0, fixture_points()), (1.1, fixture_points(1.1)), (1.0, [make_point("torch", seed=9)])):
        rid = s.create_run(
            "dlbench run -f torch,tf -m resnet50,alexnet,wide_deep,face --param vocab=3.2M "
            "--store /a/long/path/to/the/results/store.db"
        )
        for p in points:
            s.add_point(rid, p)
        s.finish_run(rid, "done")
        ids.append(rid)
    return path, ids


def whole(text: str, values: list[str], width: int, wide: bool = False) -> None:
    """Every value's words are words of the text; nothing cut; no line wider than the terminal (unless --wide)."""
    words = set(text.split()) | {w.rstrip(":") for w in text.split()}
    missing = [v for v in values if not all(w in words for w in v.split())]
    assert not missing, (missing, text)
    assert "…" not in text, text
    if not wide:
        assert max(len(line) for line in text.splitlines()) <= width, text


def point_values(r: PointResult) -> list[str]:
    """What tells a point apart, and its throughput: as the table prints them."""
    cell = PointCell(r, None, lambda: None)  # type: ignore[arg-type, return-value]
    return [
        r.spec.framework,
        r.spec.model + fmt_case_params(r.spec.case_params),
        str(r.spec.batch_size),
        COLUMNS["throughput"].cell(cell),
        r.status,
    ]


@pytest.fixture
def at(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]) -> Callable[..., str]:
    """Run the CLI as on a terminal this wide (stdout is not one: $COLUMNS says the width, as output.py reads)."""

    def run(width: int, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        monkeypatch.setenv("COLUMNS", str(width))
        code, out, err = cli(*args)
        assert code in ok, (code, out, err)
        return out

    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_results_and_run_tables(width: int, store: tuple[Path, list[str]], at: Callable[..., str]) -> None:
    path, (a, _, one) = store
    text = at(width, "results", a, "--store", str(path))
    whole(text, [a, *(v for r in fixture_points() for v in point_values(r))], width)
    single = at(width, "results", one, "--store", str(path))
    whole(single, [one, *point_values(make_point("torch", seed=9))], width)
    runs = at(width, "results", "--store", str(path))  # the runs table: whole run ids
    whole(runs, [a, one, "5"], width)


@pytest.mark.parametrize("width", WIDTHS)
def test_wide_outside_a_terminal_prints_every_column(
    width: int, store: tuple[Path, list[str]], at: Callable[..., str]
) -> None:
    path, (a, _, _) = store
    text = at(width, "results", a, "--store", str(path), "--wide")
    head = next(line for line in text.splitlines() if line.startswith("framework"))
    assert all(COLUMNS[n].header.split()[0] in head for n in ("tflops", "mfu", "cv", "step", "memory", "status"))
    whole(text, [v for r in fixture_points() for v in point_values(r)], width, wide=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_history_is_one_table_with_whole_run_ids_and_numbers(
    width: int, store: tuple[Path, list[str]], at: Callable[..., str]
) -> None:
    path, ids = store
    text = at(width, "history", "--store", str(path), ok=(0, 3))
    assert text.count("history") == 1  # one table, not one per configuration
    values = [*ids, "torch-1.0", "tf-1.0"]
    for r in [*fixture_points(), *fixture_points(1.1)]:
        if r.metrics:
            values.append(fmt_rate(r.metrics.throughput))
    whole(text, values, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_configuration_throughputs_and_ratio(
    width: int, store: tuple[Path, list[str]], at: Callable[..., str]
) -> None:
    path, (a, b, _) = store
    text = at(width, "compare", a, b, "--store", str(path), "--fail-above", "5%", ok=(0, 1, 3))
    values = [a, b]
    for ra, rb in zip(fixture_points(), fixture_points(1.1)):
        if ra.metrics and rb.metrics:
            values += [fmt_rate(ra.metrics.throughput), fmt_rate(rb.metrics.throughput), ra.spec.framework]
    whole(text, values, width)
    assert re.search(r"\b0\.9\d\d\b", text)  # the ratio B/A, whole


@pytest.mark.parametrize("width", WIDTHS)
def test_reference_show_and_list(width: int, at: Callable[..., str]) -> None:
    text = at(width, "reference", "show", "dlperf_v1", "--model", "resnet50", "--precision", "amp")
    rows = [
        r
        for r in reference.load_all()
        if r.source.file.startswith("dlperf_v1") and r.model == "resnet50" and r.precision == "amp"
    ]
    whole(text, [v for r in rows for v in (f"{r.throughput:,.2f}", r.framework, str(r.batch_size))], width)
    listed = at(width, "reference", "list")
    whole(listed, [s.file.removesuffix(".yaml") for s in reference.load_sources()], width)


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_dry_run_and_list(width: int, at: Callable[..., str], tmp_path: Path) -> None:
    text = at(width, "sweep", "wide-deep-cpu", "--dry-run", "--store", str(tmp_path / "s.db"))
    values = re.findall(r"\bvocab=\S+", text)
    assert values, text
    whole(text, ["wide_deep", *values], width)
    suites = at(width, "sweep", "--list")
    whole(suites, ["alibaba-strategies-cpu", "tf-cnn-strategies-cpu", "dlperf-gpt-cpu"], width)


@pytest.mark.parametrize("width", WIDTHS)
def test_list_tables(width: int) -> None:
    rows = [
        (c.name, c.title, "3x224x224", "sgd lr 0.1 m 0.9", f"{c.param_count:,}", f"{c.batch_fixed} / {c.batch_cpu}")
        for c in all_cases()
    ]
    fws = [
        [
            "paddle (PaddlePaddle)",
            "no",
            "-",
            "-",
            "needs 3.10-3.13",
            "its environment runs dlbench from '-e /work/main[paddle]', not from this one: run: dlbench setup paddle",
        ],
        ["torch (PyTorch)", "yes", "2.13.0+cpu", "cpu", "3.11.7", "this interpreter"],
    ]
    console = Console(file=io.StringIO(), width=width)
    console.print(cases_table(rows))
    console.print(frameworks_table(fws))
    whole(
        console.file.getvalue(),
        [v for r in rows for v in (r[0], r[4], r[5])]  # type: ignore[attr-defined]
        + ["paddle", "torch", "2.13.0+cpu"],
        width,
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_table_too_wide_for_its_keys_is_stacked(width: int) -> None:
    """Where even the key and number columns cannot fit, one block per row, 'header: value' lines."""
    cols = [Col(f"key {i}", "key") for i in range(6)] + [Col("samples/s", "number", "right")]
    rows = [[f"value-{i}-of-row-{r}-long" for i in range(6)] + [f"{1234567.891 * (r + 1):,.1f}"] for r in range(3)]
    console = Console(file=io.StringIO(), width=width)
    console.print(fit(cols, rows, title="t"))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    whole(text, [v for r in rows for v in r], width)
    assert ("key 0: value-0-of-row-0-long" in text) == (width < 200)


def test_the_progress_bar_keeps_its_elapsed_time_at_60_columns() -> None:
    console = Console(file=io.StringIO(), width=60, force_terminal=True)
    point = make_point("torch", model="wide_deep", batch=16384)
    with RunProgress(2, console) as ui:
        ui.started(0, _long(point, sparse=0, vocab=3_200_000).spec)
        ui.progress.refresh()
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert re.search(r"\d:\d\d:\d\d", text) and "0:00:…" not in text, text


@pytest.mark.parametrize(
    ("args", "optional"),
    [
        (("run",), ("speedup", "samples/kWh")),
        (("results",), ("speedup", "samples/kWh")),
        (("history",), ("finished", "vs segment start", "p")),
        (("compare",), ("p", "MFU A → B")),
        (("reference", "show"), ("line", "source")),
        (("reference", "list"), ("organisation",)),
        (("list",), ("model", "optimizer", "build", "python")),
    ],
)
def test_each_command_names_its_optional_columns_in_its_help(
    args: tuple[str, ...], optional: tuple[str, ...], at: Callable[..., str]
) -> None:
    text = " ".join(at(200, *args, "--help").split())
    wide = text[text.index("--wide") :]
    assert all(name in wide for name in optional), wide
