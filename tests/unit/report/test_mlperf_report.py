"""The report's section for MLPerf's workloads (#47): a LoRA point's trainable and frozen counts and MFU by the LoRA
FLOP count and by the full-model one (their ratio is the two counts'); a DLRM point's look-ups/s and embedding GB/s
from its samples/s; MLPerf's published times of those benchmarks beside them. Points are built with constant step
times (no figure was measured)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.cases import get_case
from dlbench.cases.llama import flops_per_sample
from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.store.store import StoredPoint
from tests.support.reports import llm_point


def test_lora_and_dlrm_points_have_their_section(tmp_path: Path) -> None:
    lora = llm_point("llama2_70b", 20.0, 8, "bf16", fsdp=True, case_params=(("lora", 16),))
    dense = llm_point("llama_tiny", 0.01, 1, "fp32")
    dlrm = llm_point("dlrm_tiny", 0.01, 1, "fp32")  # 2 samples per 0.01 s step: 200 samples/s
    report = build_report([], [StoredPoint(i, "run1", p) for i, p in enumerate([lora, dense, dlrm])])
    (row,) = report.lora
    assert (row.trainable, row.frozen, row.layout) == ("44,564,480", "68,976,648,192", "FSDP8")
    case = get_case("llama2_70b").configured({"lora": 16})
    ratio = flops_per_sample(case, full_model=True) / flops_per_sample(case)
    mfu, full = (float(x.rstrip("%")) for x in (row.mfu, row.mfu_full_model))
    assert full / mfu == pytest.approx(ratio, rel=0.01)  # the same time, the two counts
    (d,) = report.dlrm
    assert (d.samples_per_s, d.lookups_per_s) == ("200.0", "42,800")  # rates as report/digits.py writes them
    assert d.embedding_gb_per_s == "0.0055"  # 200 x 214 look-ups x 16 floats x 4 bytes: 0.00548 GB/s
    assert {a.model for a in report.mlperf} == {"llama2_70b", "dlrm_v2"}
    page = render_html(report)
    assert "LoRA fine-tuning and DLRMv2" in page and "5.1-0058" in page
    md = write_markdown(report, tmp_path / "r.md")[0].read_text()
    assert "| llama2_70b lora=16 | torch | FSDP8 | bf16 | 44,564,480 | 68,976,648,192 |" in md
