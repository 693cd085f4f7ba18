"""The report's MoE section (#36): each MoE point by layout with tokens/s and TFLOP/s per device by active
parameters, the worst layer's imbalance, the dropped share and the all-to-all share from its stored routing
figures; forced routing marked; dense decoders left to their own section. Points are built with constant step
times and routing figures written here (no figure was measured)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.store.store import StoredPoint
from tests.support.reports import llm_point

ROUTING = {"imbalance_max": 1.25, "dropped_fraction": 0.05, "all_to_all_share": 0.3, "forced_balanced": False}


def test_the_section_shows_layout_routing_and_marks_forced_points(tmp_path: Path) -> None:
    ep = llm_point("moe_tiny", 0.01, 2, "fp32", gpu="NVIDIA A2", expert_parallel=2)
    ep = dataclasses.replace(ep, extra={"routing": ROUTING})
    forced = llm_point("moe_tiny", 0.01, 4, "fp32", gpu="NVIDIA A2", expert_parallel=2, routing="balanced")
    dense = llm_point("llama_tiny", 0.01, 1, "fp32", gpu="NVIDIA A2")
    report = build_report([], [StoredPoint(i, "run1", p) for i, p in enumerate([ep, forced, dense])])
    assert [r.layout for r in report.moe] == ["EP2 x DP1", "EP2 x DP2 (forced balanced)"]
    row = report.moe[0]
    assert (row.imbalance, row.dropped, row.all_to_all) == ("1.25", "5.0%", "30%")
    assert report.moe[1].imbalance == "-"  # no routing figures stored: none shown
    assert row.tokens_per_s_per_device == f"{2 * 2 / 0.01 * 64 / 2:,.0f}"
    assert [r.case for r in report.llm] == ["llama_tiny"]
    page = render_html(report)
    assert "Mixtures of experts" in page and "forced balanced" in page
    md = write_markdown(report, tmp_path / "r.md")[0].read_text()
    assert "## Mixtures of experts" in md and "| 1.25 | 5.0% | 30% |" in md
