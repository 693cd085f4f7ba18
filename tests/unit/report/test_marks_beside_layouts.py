"""The † of a throughput whose --converge run did not converge (#34) in the tables beside the main ones: GPT by
layout, decoder pretraining, mixtures of experts and the gradient-strategy studies; said under each table that
has one; and a strategy that did not converge is never called the fastest. Points built here (no training)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from markupsafe import escape

from dlbench.analysis.convergence import VERDICT_KEY
from dlbench.records import PointResult
from dlbench.report.convergence import NOT_CONVERGED_MARK
from dlbench.report.document import build_report
from dlbench.report.groups import build_sections
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.report.strategies import strategy_report
from dlbench.store.store import StoredPoint
from tests.support.reports import gpt_point, llm_point, study_points

NOTE = f"{NOT_CONVERGED_MARK} did not converge: the verdict of its --converge run is 'diverged'"


def judged(result: PointResult, verdict: str) -> PointResult:
    return dataclasses.replace(result, extra={**result.extra, VERDICT_KEY: {"verdict": verdict}})


def _beside_points() -> list[StoredPoint]:
    small = {"layers": 2, "hidden": 128, "heads": 4, "seq": 64, "vocab": 256}
    gpt_ok, gpt_bad = gpt_point(1, small, 1, 8, 0.5), gpt_point(2, small, 2, 8, 0.5, tensor=2, recompute=False)
    results = [
        judged(gpt_ok.result, "converged"),
        judged(gpt_bad.result, "diverged"),
        judged(llm_point("llama_tiny", 0.01, 1, "fp32", gpu="NVIDIA A2"), "converged"),
        judged(llm_point("llama_tiny", 0.02, 2, "fp32", gpu="NVIDIA A2", fsdp=True), "diverged"),
        llm_point("moe_tiny", 0.01, 1, "fp32", gpu="NVIDIA A2"),  # never judged: no mark
        judged(llm_point("moe_tiny", 0.01, 2, "fp32", gpu="NVIDIA A2", expert_parallel=2), "diverged"),
    ]
    return [StoredPoint(i + 1, "run1", r) for i, r in enumerate(results)]


def test_layout_llm_and_moe_rows_mark_exactly_the_points_that_did_not_converge(tmp_path: Path) -> None:
    report = build_report([], _beside_points())
    assert [r.unconverged for r in report.gpt_layouts] == ["", "diverged"]
    assert {r.layout: r.unconverged for r in report.llm} == {"DP1": "", "DP2 FSDP": "diverged"}
    assert [(r.layout, r.unconverged) for r in report.moe] == [("one device", ""), ("EP2 x DP1", "diverged")]
    for rows in (report.llm, report.moe):
        assert [r.tokens_per_s_per_device.endswith(f" {NOT_CONVERGED_MARK}") for r in rows] == [False, True]
    md = write_markdown(report, tmp_path / "r.md")[0].read_text(encoding="utf-8")
    gpt_lines = [line for line in md.splitlines() if line.startswith("| DP_") or line.startswith("| MP_")]
    assert [NOT_CONVERGED_MARK in line for line in gpt_lines] == [False, True]
    for title in ("**GPT by parallel layout**", "## Decoder pretraining (llama)", "## Mixtures of experts"):
        table = md.split(title, 1)[1].split("\n## ", 1)[0]  # the table's part, up to the next section
        assert f"- {NOTE}" in table, title
    page = render_html(report)
    gpt_table = page.split('class="published gpt-layouts"', 1)[1].split("</table>", 1)[0]
    assert gpt_table.count('<sup class="unconverged" title="did not converge: diverged">') == 1
    assert page.count(f"{NOT_CONVERGED_MARK}</td>") == 2  # the Llama and MoE rows' text cells
    for anchor in ("gpt-layouts", 'id="llm"', 'id="moe"'):
        assert str(escape(NOTE)) in page.split(anchor, 1)[1].split("</section>", 1)[0], anchor


def test_a_strategy_that_did_not_converge_is_marked_and_never_the_fastest(tmp_path: Path) -> None:
    points = study_points()
    fastest = next(i for i, p in enumerate(points) if p.spec.strategy == "ps-cpu" and p.spec.world_size == 2)
    points[fastest] = judged(points[fastest], "diverged")
    report = strategy_report(build_sections([StoredPoint(i + 1, "run1", r) for i, r in enumerate(points)]))
    [study] = report.studies
    cell = study.at("ps-cpu", 2)
    assert cell is not None and cell.summary.endswith(f" {NOT_CONVERGED_MARK}")
    two = next(v for v in report.verdicts if v.devices == 2)
    assert (two.fastest, two.runner_up) == ("replicated-copy", "-")  # ps-cpu was 40% faster, but did not train
    assert report.unconverged_note.startswith(NOTE) and "never the fastest" in report.unconverged_note
    clean = strategy_report(build_sections([StoredPoint(i + 1, "run1", r) for i, r in enumerate(study_points())]))
    assert clean.unconverged_note == "" and next(v for v in clean.verdicts if v.devices == 2).fastest == "ps-cpu"
