"""The report's FLOPs and MFU: a table per section, a line in every cell, "MFU by framework" and the roofline view."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from dlbench.cases import get_case
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.report.document import build_report
from dlbench.report.export import to_csv, to_json
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.report.table import COLUMNS, points_table
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import StoredPoint

PROTO = Protocol(warmup=1, steps=4, repeats=2, statistic="median", preset="quick")
A100 = "NVIDIA A100-SXM4-80GB"


def gpu_point(
    framework: str, step_s: float, gpu: str = A100, math_mode: str = "tf32", status: str = "ok", devices: int = 1
) -> PointResult:
    """A resnet50 tf32 point on a GPU with constant step times (so that its throughput is exact)."""
    spec = PointSpec(
        framework=framework,
        model="resnet50",
        batch_size=64,
        protocol=PROTO,
        precision="tf32",
        device="cuda",
        devices_per_node=devices,
        strategy="ddp" if devices > 1 else "none",
    )
    env = Environment(
        identity={"device": "cuda", "device_model": gpu, "math_mode": math_mode, "framework": framework},
        descriptive={"hostname": "gpu-box"},
    )
    if status != "ok":
        return PointResult(spec, status, env=env, error="out of memory")  # type: ignore[arg-type]
    ranks = tuple(RankRaw(r, tuple(RepeatRaw((step_s,) * 4, 4 * step_s) for _ in range(2))) for r in range(devices))
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), env)


@pytest.fixture
def points() -> list[StoredPoint]:
    results = [
        gpu_point("torch", 0.1),
        gpu_point("tf", 0.2),
        gpu_point("jax", 0.1, gpu="NVIDIA A2"),
        gpu_point("paddle", 0.1, status="oom"),
    ]
    return [StoredPoint(i + 1, "run1", r) for i, r in enumerate(results)]


def expected_mfu(step_s: float) -> float:
    achieved = 64 / step_s * get_case("resnet50").train_flops_per_sample() / 1e12
    return achieved / 156.0  # A100 tf32 dense, from the datasheet


def test_html_report_shows_flops_mfu_and_the_roofline(points: list[StoredPoint]) -> None:
    page = render_html(build_report([], points))
    assert "FLOPs and MFU" in page and "MFU by framework" in page
    assert "Achieved TFLOP/s beside the device peak" in page
    assert f"{expected_mfu(0.1):.1%}" in page and f"{expected_mfu(0.2):.1%}" in page
    assert "peak unknown" in page and "NVIDIA A2 is not in gpu_peaks.yaml" in page
    assert "156 TFLOP/s tf32 (datasheet, A100 SXM4 80GB)" in page


def test_markdown_report_has_the_same_figures(points: list[StoredPoint], tmp_path: Path) -> None:
    written = write_markdown(build_report([], points), tmp_path / "r.md")
    text = written[0].read_text(encoding="utf-8")
    assert "**FLOPs and MFU**" in text and f"{expected_mfu(0.1):.1%}" in text and "peak unknown" in text
    names = {p.name for p in written}
    assert "resnet50-tf32-synthetic-cuda-mfu.png" in names and "resnet50-tf32-synthetic-cuda-roofline.png" in names


def test_csv_and_json_carry_achieved_flops_and_mfu(points: list[StoredPoint]) -> None:
    rows = {r["framework"]: r for r in csv.DictReader(io.StringIO(to_csv(points)))}
    assert float(rows["torch"]["mfu"]) == pytest.approx(expected_mfu(0.1))
    assert float(rows["torch"]["peak_tflops_per_device"]) == 156.0 and rows["torch"]["peak_kind"] == "datasheet"
    assert rows["jax"]["mfu"] == "" and rows["jax"]["peak_note"].startswith("peak unknown")
    assert rows["paddle"]["achieved_tflops"] == "" and rows["paddle"]["train_flops_per_sample"] != ""
    doc = {d["spec"]["framework"]: d["efficiency"] for d in json.loads(to_json(points))}
    assert doc["tf"]["mfu"] == pytest.approx(expected_mfu(0.2))
    assert doc["tf"]["achieved_tflops"] == pytest.approx(320 * get_case("resnet50").train_flops_per_sample() / 1e12)


def test_run_table_has_tflops_and_mfu_columns(points: list[StoredPoint]) -> None:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=300)
    console.print(points_table([p.result for p in points], columns=tuple(COLUMNS)))  # --wide: MFU is not compact
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "TFLOP/s" in text and "MFU" in text and "peak unknown" in text
    assert f"{expected_mfu(0.1):.1%} (datasheet)" in text
    assert "MFU against 156 TFLOP/s tf32 (datasheet, A100 SXM4 80GB)" in text


def test_mfu_of_a_multi_device_point_divides_by_every_device() -> None:
    p = StoredPoint(1, "run1", gpu_point("torch", 0.1, devices=4))
    row = next(csv.DictReader(io.StringIO(to_csv([p]))))
    assert float(row["mfu"]) == pytest.approx(4 * expected_mfu(0.1) / 4)
    assert np.isclose(float(row["achieved_tflops"]), 4 * 640 * get_case("resnet50").train_flops_per_sample() / 1e12)
