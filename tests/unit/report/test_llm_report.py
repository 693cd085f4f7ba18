"""The decoder-pretraining view (#35): the published anchors (stack, GPU, layout, precision, tokens/s/GPU,
TFLOP/s/GPU, source) matched to points of the same model shape, GPU and precision; the report's section with
tokens/s and TFLOP/s per device, MFU by precision and memory per device; and the llm-cpu and llm-h100 suites."""

from __future__ import annotations

from pathlib import Path

from dlbench.cases.llama_layout import llama_layout_refusal
from dlbench.reference.llm import anchors, matching
from dlbench.report.document import build_report
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.store.store import StoredPoint
from dlbench.suite import load
from dlbench.suite.expand import expand
from tests.support.reports import H100
from tests.support.reports import llm_point as _point


def test_the_issues_anchors_are_all_there_with_a_source() -> None:
    rows = anchors()
    assert {a.stack for a in rows} == {"NeMo / Megatron-Bridge", "torchtitan", "MaxText", "Megatron-Core"}
    by = {(a.stack, a.layout): a for a in rows}
    assert by[("NeMo / Megatron-Bridge", "NeMo's recipe (8x H100)")].tokens_per_s_per_gpu == 14451
    assert by[("NeMo / Megatron-Bridge", "NeMo's recipe (8x H100)")].tflops_per_gpu == 744
    titan = ("FSDP", "FSDP + torch.compile", "FSDP + torch.compile + Float8")
    assert [by[("torchtitan", k)].tokens_per_s_per_gpu for k in titan] == [5762, 6667, 8532]
    assert by[("MaxText", "one node")].tflops_per_gpu == 492
    assert by[("Megatron-Core", "Megatron-Core 3D/4D parallel")].mfu == "41-48%"
    assert all(a.source.startswith("https://") for a in rows)


def test_anchors_match_shape_gpu_and_precision() -> None:
    fp8 = matching("llama3_8b", {}, H100, "fp8")
    assert {a.stack for a in fp8} == {"NeMo / Megatron-Bridge", "torchtitan"} and len(fp8) == 2
    assert len(matching("llama", {}, H100, "bf16")) == 2  # the family at its default shape is the 8B
    assert matching("llama3_1b", {}, H100, "bf16") == []  # no anchor on the 1B
    assert matching("llama3_8b", {}, "NVIDIA A100-SXM4-80GB", "bf16") == []


def test_the_report_section_shows_llama_points_with_anchors(tmp_path: Path) -> None:
    points = [
        StoredPoint(1, "run1", _point("llama3_8b", 2.0, 8, "bf16", fsdp=True)),
        StoredPoint(2, "run1", _point("llama_tiny", 0.01, 1, "fp32", gpu="NVIDIA A2")),
    ]
    report = build_report([], points)
    assert [r.layout for r in report.llm] == ["DP8 FSDP", "DP1"]
    big = report.llm[0]
    assert "torchtitan FSDP: 5762 tok/s/GPU" in big.anchors and big.mfu.endswith("%") and big.mfu_bf16 == big.mfu
    assert big.memory_per_device == "40,960 MiB" and report.llm[1].mfu == "-"  # A2: peak unknown, no MFU
    page = render_html(report)
    assert "Decoder pretraining (llama)" in page and "MFU vs BF16 peak" in page and big.tokens_per_s_per_device in page
    md = write_markdown(report, tmp_path / "r.md")[0].read_text()
    assert "## Decoder pretraining (llama)" in md and "torchtitan FSDP" in md


def test_the_llm_suites_expand_to_runnable_layouts() -> None:
    cpu = expand(load("llm-cpu"), "cpu")
    assert len(cpu) == 18 and {p.spec.precision for p in cpu} == {"fp32", "bf16"}
    assert {p.spec.world_size for p in cpu} == {1, 2, 4}
    labels = {(p.spec.layout.label, p.spec.layout.fsdp) for p in cpu}
    assert {("DP2", True), ("TP2", False), ("PP2 M4", False), ("DP2 TP2", True), ("TP2 PP2 M4", False)} <= labels
    assert all(llama_layout_refusal(p.spec) is None for p in cpu)
    gpu = expand(load("llm-h100"), "cuda")
    shapes = {(p.spec.world_size, p.spec.layout.fsdp, p.spec.params.get("hidden")) for p in gpu}
    assert shapes == {(1, False, 2048), (8, True, None)}


def test_gpu_suites_run_fp8_compiled_and_eager_fp8_only_as_its_own_layout() -> None:
    """#40: float8 training runs under torch.compile in every GPU suite (as torchtitan runs it and the fp8 anchors
    were measured); an eager fp8 point exists only under a layout that says so in its name."""
    from dlbench.suite import builtin_names

    gpu = [load(name) for name in builtin_names()]
    with_fp8 = [s.name for s in gpu if s.device == "cuda" and "fp8" in s.axes.precision]
    assert with_fp8 == ["llm-h100"]  # the one GPU suite with fp8 (any other would be expanded here too)
    fp8 = [p for p in expand(load("llm-h100"), "cuda") if p.spec.precision == "fp8"]
    assert fp8  # llm-h100's
    eager = [p for p in fp8 if not p.spec.compile]
    assert all(p.spec.compile or "eager" in str(p.batch_group) for p in fp8), eager
    assert {str(p.batch_group) for p in eager} == {"llama3_1b_fp8_eager"}
    assert any(p.spec.compile and p.spec.world_size == 1 for p in fp8)
