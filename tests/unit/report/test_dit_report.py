"""The report's rows for #48: a FLUX.1 point's images/s, TFLOP/s by the DiT's FLOP convention and MFU in the MLPerf
section; a DeepSeek point's imbalance in its first and last windows of steps in the MoE section; MLPerf's published
times of FLUX.1 and DeepSeek-V3 beside them, with their GPU counts. Points are built with constant step times (no
figure was measured)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlbench.analysis.convergence import REFERENCE_KEY
from dlbench.cases import get_case
from dlbench.cases.dit import flops_per_sample
from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.store.store import StoredPoint
from tests.support.reports import llm_point


def test_dit_rows_moe_balance_and_the_published_times(tmp_path: Path) -> None:
    flux = llm_point("flux1", 2.0, 8, "bf16", fsdp=True)  # 2 images per GPU per 2 s step: 8 images/s
    routing = {
        "imbalance_over_steps": [{"steps": [0, 4], "imbalance_mean": 1.31}, {"steps": [4, 8], "imbalance_mean": 1.08}]
    }
    moe = llm_point("deepseek_tiny", 0.01, 1, "fp32")
    moe = dataclasses.replace(moe, extra={**moe.extra, "routing": routing})
    fast = llm_point("dit_tiny", 0.001, 1, "fp32")  # 2 images per 1 ms step: 2,000 images/s
    ref = dataclasses.replace(fast, extra={**fast.extra, REFERENCE_KEY: True})  # its reference run: the same spec
    seed1 = llm_point("dit_tiny", 0.001, 1, "fp32", seed=1)
    report = build_report([], [StoredPoint(i, "run1", p) for i, p in enumerate([flux, moe, fast, ref, seed1])])
    tiny, reference, other_seed, row = report.dit  # by case name: every row told apart
    assert (reference.case, other_seed.case) == ("dit_tiny seed=0 (reference)", "dit_tiny seed=1")
    assert (tiny.case, tiny.images_per_s) == ("dit_tiny seed=0", "2,000")  # as report/digits.py writes a rate: no 2e+03
    assert float(tiny.tflops) == pytest.approx(2000 * flops_per_sample(get_case("dit_tiny")) / 1e12, rel=0.01)
    assert (row.images_per_s, row.layout, row.precision) == ("8.00", "FSDP8", "bf16")
    assert float(row.tflops) == pytest.approx(8 * flops_per_sample(get_case("flux1")) / 1e12, rel=0.01)
    assert row.mfu.endswith("(datasheet)")
    (m,) = report.moe
    assert m.over_steps == "1.31 -> 1.08"
    assert {a.model for a in report.mlperf} == {"flux1", "deepseek_v3"}
    page = render_html(report)
    assert "FLUX.1 (DiT)" in page and "74.441" in page and "1.31 -&gt; 1.08" in page
    md = write_markdown(report, tmp_path / "r.md")[0].read_text()
    assert "| flux1 seed=0 | torch | FSDP8 | bf16 | 8.00 |" in md
    assert "| v6.0 | DeepSeek-V3 | 2.02 | 3.60 eval loss |" in md and "| 8192 |" in md
