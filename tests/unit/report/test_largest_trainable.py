"""The report's "Special cases" table: the largest value of a case parameter that trains, kept with the point
measured at it, and DLPerf's max num_classes beside the face rows (report/largest_trainable.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cases.face import DLPERF_MAX_CLASSES
from dlbench.report.largest_trainable import dlperf_max_classes, max_value_rows, mode_of
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


def test_face_modes_are_named_from_their_parameters() -> None:
    assert mode_of("face", {"classes": 5}, "classes") == "full"
    assert mode_of("face", {"model_parallel": 1}, "classes") == "model_parallel"
    assert mode_of("face", {"model_parallel": 1, "sample": 10}, "classes") == "partial_fc"
    assert mode_of("face", {"model_parallel": 1, "sample": 25}, "classes") == "model_parallel=1, sample=25%"
    assert mode_of("wide_deep", {"vocab": 9, "sparse": 0}, "vocab") == "sparse=0"


def test_dlperf_reference_rows_are_the_seed_s() -> None:
    rows = {r.scale: (r.oneflow, r.mxnet) for r in dlperf_max_classes()}
    assert rows == {"1n1c": ("2M", "1.8M"), "1n8c": ("13.5M", "12M")}
    assert len(rows) == len(DLPERF_MAX_CLASSES)


@pytest.mark.parametrize("threshold", [37_500, 41_000])
def test_run_keeps_the_search_and_the_report_shows_its_boundary(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: int
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", f"param_oom_above:classes:{threshold}")
    code, _, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "face",
        "-b",
        "4",
        "--param",
        "classes=max",
        "--param",
        "model_parallel=1",
        "--param",
        "sample=10",
        "--memory-limit",
        "1GiB",
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
    )
    assert code == 0, err
    largest = threshold // 1000 * 1000  # classes are searched in units of 1,000
    [row] = max_value_rows(Store(store_path).points())
    assert (row.framework, row.model, row.name, row.mode, row.scale) == (
        "fake",
        "face",
        "classes",
        "partial_fc",
        "1n1c",
    )
    assert row.largest == f"{largest // 1000}K" and row.fails_at == f"{largest // 1000 + 1}K"
    assert row.budget == "1 GiB (emulated)"
    assert row.exact == f"within 1K, reproduced (run again: {largest // 1000 + 1}K oom, {largest // 1000}K ok)"
    code, text, _ = cli("results", "--format", "json", "--store", str(store_path))
    [measured] = [p for p in json.loads(text) if "max_param" in p["extra"]]
    facts = measured["extra"]["max_param"]
    assert facts["max"] == largest and facts["fails_at"] == largest + 1000 and facts["probes"] >= 2
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    for out, fmt in ((html, "html"), (md, "md")):
        code, _, err = cli("report", "--format", fmt, "-o", str(out), "--store", str(store_path))
        assert code == 0, err
    page = html.read_text()
    assert 'id="special"' in page and "Largest value that trains" in page and "dlperf-max-classes" in page
    assert f'<td class="largest">{largest // 1000}K</td>' in page and "13.5M" in page
    text = md.read_text()
    assert "## Special cases" in text and f"| {largest // 1000}K | {largest // 1000 + 1}K |" in text


def test_no_special_section_without_a_special_point(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    code, _, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "-b",
        "2",
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
    )
    assert code == 0, err
    out = tmp_path / "r.html"
    code, _, err = cli("report", "-o", str(out), "--store", str(store_path))
    assert code == 0, err
    page = out.read_text()
    assert 'id="special"' not in page and "Wide &amp; Deep: no wide_deep point" in page
