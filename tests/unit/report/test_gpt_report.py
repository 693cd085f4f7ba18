"""The report's GPT layouts (#23): DLPerf's case names and groups, TFLOP/s per device (hardware where recomputed,
model otherwise), memory and pipeline facts per row, DLPerf's figures beside matching points only, the chart, and
a suite's named layouts expanding into points."""

from __future__ import annotations

import pytest

from dlbench.cases import get_case
from dlbench.cases.gpt import layout_flops_per_sample
from dlbench.report.chart_base import render_png
from dlbench.report.gpt_layouts import case_names, group_of, layout_chart, layout_rows
from tests.support.reports import GPT_SMALL as SMALL
from tests.support.reports import gpt_point as _point

DLPERF = {"hidden": 1536, "layers": 16, "heads": 16, "seq": 2048, "vocab": 51200}


def test_names_and_groups_follow_dlperf() -> None:
    p = _point(1, SMALL, 4, 8, 1.0, pipeline=2, micro=4).result.spec
    assert case_names(p, "") == ["DP_PP_2x1x2_16_256x4"]
    assert case_names(p, "A+2D_8x1x1_16_1536x16+DP_8x1x1_16_1536x16") == ["2D_8x1x1_16_1536x16", "DP_8x1x1_16_1536x16"]
    assert [
        group_of(n)
        for n in ("DP_8x1x1_16_1x1", "MP_1x8x1_16_1x1", "2D_2x4x1_16_1x1", "MP_PP_1x8x4_512_1x1", "PP_1x1x2_16_1x1")
    ] == ["DP", "TP", "2D", "PP", "PP"]


def test_rows_count_hardware_tflops_per_device_and_keep_pipeline_facts() -> None:
    pipe = {"pipeline": {"stage_forward_ms": [10.0, 12.5], "stage_backward_ms": [20.0, 30.0], "bubble": 0.2}}
    points = [
        _point(1, SMALL, 1, 8, 0.5),
        _point(2, SMALL, 2, 8, 0.5, tensor=2, recompute=False),
        _point(3, SMALL, 2, 16, 1.0, pipeline=2, micro=4, extra=pipe),
    ]
    rows = {r.case: r for r in layout_rows(points)}
    assert list(rows) == ["DP_1x1x1_8_256x4", "MP_1x2x1_8_256x4", "DP_PP_1x1x2_16_256x4"]
    case = get_case("gpt").configured(SMALL)
    model, hardware = layout_flops_per_sample(case, None, True)
    one, tp, pp = rows.values()
    assert one.tflops_per_device == pytest.approx(16 * hardware / 1e12)  # 8 sequences / 0.5 s on 1 device
    assert one.model_tflops_per_device == pytest.approx(16 * model / 1e12) and one.counted == "hardware (recompute)"
    assert tp.tflops_per_device == pytest.approx(8 * model / 1e12) and tp.counted == "model"  # 16 seq/s / 2
    assert tp.memory_per_device == 2 * 2**20 and tp.tokens_per_s == pytest.approx(16 * 64)  # the busiest rank
    assert pp.bubble == pytest.approx(1 / 5) and pp.stage_ms == "fwd 10/12 · bwd 20/30 ms"
    assert all(not r.published for r in rows.values())


def test_dlperf_figures_sit_beside_their_own_case_only() -> None:
    gpu = [
        _point(1, DLPERF, 1, 2, 0.4, device="cuda", group="DP_1x1x1_2_1536x16"),
        _point(2, DLPERF, 8, 16, 0.4, tensor=8, device="cuda", group="MP_1x8x1_16_1536x16+2D_1x8x1_16_1536x16"),
        _point(3, DLPERF, 8, 4, 0.4, device="cuda"),
    ]  # batch 4 per replica: no DLPerf case
    rows = layout_rows(gpu)
    by_case = {r.case: r for r in rows}
    assert {p.who: p.tflops_per_device for p in by_case["DP_1x1x1_2_1536x16"].published} == {
        "OneFlow": 49.43,
        "Megatron-LM": 43.25,
    }
    assert {p.tflops_per_device for p in by_case["2D_1x8x1_16_1536x16"].published} == {31.15, 30.2}
    assert {p.tflops_per_device for p in by_case["MP_1x8x1_16_1536x16"].published} == {31.26, 28.99}
    assert not by_case["DP_8x1x1_32_1536x16"].published


def test_the_chart_draws_every_group_with_an_ideal_and_memory() -> None:
    points = [
        _point(1, SMALL, 1, 4, 0.5, group="DP_1x1x1_4_256x4"),
        _point(2, SMALL, 2, 4, 0.6),
        _point(3, SMALL, 2, 8, 0.5, tensor=2),
        _point(4, SMALL, 4, 4, 0.5, tensor=2),
        _point(5, SMALL, 2, 16, 1.0, pipeline=2, micro=4),
    ]
    charts = layout_chart(layout_rows(points), {})
    assert len(charts.charts) == 1
    fig = charts.charts[0].figure
    top, bottom = fig.axes[:2]
    assert len(top.patches) == len(bottom.patches) == 5  # a bar per case, memory below
    assert len(top.collections) == 5  # the ideal (the 1-device case's TFLOP/s) over every case
    labels = [t.get_text() for t in bottom.get_xticklabels()]
    assert labels[-1] == "DP_PP_1x1x2_16_256x4 (bubble 20%)"
    assert render_png(charts.charts[0])[:4] == b"\x89PNG"
    assert layout_chart([], {}).charts == []


def test_a_suite_s_layouts_become_points() -> None:
    from dlbench.suite.expand import expand
    from dlbench.suite.schema import SuiteError, parse_suite

    suite = parse_suite(
        "name: s\naxes: {framework: fake, model: gpt}\nparams: {seq: 64}\nlayouts:\n"
        "  - {name: MP_1x2x1_8_256x4, scale: 1n2c, batch: 8, tensor_parallel: 2, recompute: true,"
        " params: {hidden: 256, layers: 4}}\n"
        "  - {name: PP_1x1x2_16_256x4, scale: 1n2c, batch: 16, pipeline_parallel: 2,"
        " micro_batches: 4, schedule: gpipe, params: {hidden: 256, layers: 4}}\n",
        "s.yaml",
    )
    points = expand(suite, "cpu")
    assert [p.batch_group for p in points] == ["MP_1x2x1_8_256x4", "PP_1x1x2_16_256x4"]
    tp, pp = (p.spec for p in points)
    assert (tp.layout.tensor_parallel, tp.layout.recompute, tp.world_size, tp.params) == (
        2,
        True,
        2,
        {"hidden": 256, "layers": 4, "seq": 64},
    )
    assert (pp.layout.pipeline_parallel, pp.layout.micro_batches, pp.layout.schedule, pp.batch_size) == (
        2,
        4,
        "gpipe",
        16,
    )
    with pytest.raises(SuiteError, match="matches none of suite s's scale values"):  # named, not 'no point left'
        expand(suite, "cpu", only={"scale": ["1n4c"]})


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("{name: a, scale: 1n4c, batch: 4, tensor_parallel: 3}", "do not divide by 3 x 1"),
        ("{name: a, scale: 1n2c, batch: 3, pipeline_parallel: 2, micro_batches: 2}", "multiple of --micro-batches"),
        ("{name: a b, scale: 1n1c, batch: 4}", "name"),
        ("{name: a, scale: 1n1c, batch: 4, params: {hidden: 100, heads: 3}}", "multiple of heads"),
    ],
)
def test_a_bad_layout_names_its_line(layout: str, message: str) -> None:
    from dlbench.suite.schema import SuiteError, parse_suite

    with pytest.raises(SuiteError, match=message):
        parse_suite(f"name: s\naxes: {{framework: fake, model: gpt}}\nlayouts:\n  - {layout}\n", "s.yaml")


def test_the_chart_draws_dlperfs_markers_and_marks_a_bar_above_its_ideal() -> None:
    gpu = [
        _point(1, DLPERF, 1, 2, 0.4, device="cuda", group="DP_1x1x1_2_1536x16"),
        _point(2, DLPERF, 8, 16, 0.4, tensor=8, device="cuda", group="MP_1x8x1_16_1536x16+2D_1x8x1_16_1536x16"),
    ]
    chart = layout_chart(layout_rows(gpu), {}).charts[0]
    top = chart.figure.axes[0]
    hollow = [line for line in top.lines if line.get_marker() not in (None, "None", "")]
    assert len(hollow) == sum(len(r.published) for r in layout_rows(gpu)) > 0
    assert "Hollow markers: DLPerf's published" in chart.caption and "Hatched" not in chart.caption
    fast = [_point(1, SMALL, 1, 8, 0.5), _point(2, SMALL, 2, 8, 0.05, tensor=2)]  # 2 devices beat 1 alone
    chart = layout_chart(layout_rows(fast), {}).charts[0]
    words = [t.get_text() for t in chart.figure.axes[0].texts]
    assert words.count("above ideal") == 1 and "Hatched, 'above ideal'" in chart.caption
    assert "drawn only beside points of its own cases" in chart.caption
