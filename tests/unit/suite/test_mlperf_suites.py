"""The mlperf suites (#47, #48): mlperf-cpu holds a tiny member of each of MLPerf Training v6.0's seven workloads,
each a convergence point that can run; mlperf-h100 holds each workload's model on one H100 node; a named layout
may name the models it runs (the LoRA layout applies to llama_tiny only), and one naming a model outside the axis
is refused in one line."""

from __future__ import annotations

import pytest

from dlbench import suite
from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.refusals import refusal
from dlbench.spec import PointSpec
from dlbench.suite.expand import expand
from dlbench.suite.schema import SuiteError, parse_suite

# MLPerf Training v6.0's workloads (mlcommons/training's README) and the dlbench case of each one's tiny member.
V6 = {
    "flux.1": "dit_tiny",
    "llama3.1_8b": "llama_tiny",
    "llama3.1_405b": "llama_tiny",
    "llama2_70b_lora": "llama_tiny lora",
    "dlrm_dcnv2": "dlrm_tiny",
    "gpt_oss_20b": "gpt_oss_tiny",
    "deepseekv3": "deepseek_tiny",
}


def _label(spec: PointSpec) -> str:
    return spec.model + (" lora" if "lora" in spec.params else "")


def test_mlperf_cpu_trains_every_v6_workload_to_its_target() -> None:
    points = expand(suite.load("mlperf-cpu"), "cpu", "/d")
    labels = {_label(p.spec) for p in points}
    assert labels == set(V6.values()) and len(points) == len(labels)  # one point per tiny member
    for p in points:
        s = p.spec
        assert s.converge and s.world_size == 1 and s.precision == "fp32" and refusal(s) is None
        assert target_for(get_case(s.model).configured(s.params)) is not None
    lora = next(p.spec for p in points if "lora" in p.spec.params)
    assert lora.model == "llama_tiny" and lora.params == {"lora": 8, "seq": 32}
    assert next(p.spec for p in points if p.spec.model == "dit_tiny").input_size == 8


def test_mlperf_h100_runs_each_workloads_model_and_every_point_can_run() -> None:
    points = expand(suite.load("mlperf-h100"), "cuda", "/d")
    models = {p.spec.model for p in points}
    assert models == {"flux1", "llama3_8b", "llama2_70b", "dlrm_v2", "gpt_oss_20b", "deepseek_v3"}
    assert [refusal(p.spec) for p in points] == [None] * len(points)
    flux = next(p.spec for p in points if p.spec.model == "flux1")
    assert flux.layout.fsdp and flux.world_size == 8
    ds = next(p.spec for p in points if p.spec.model == "deepseek_v3")
    assert ds.layout.expert_parallel == 8 and ds.params == {"layers": 2, "dense_layers": 1}


def test_a_layout_naming_a_model_outside_the_axis_is_refused() -> None:
    text = (
        "name: x\naxes: {framework: torch, model: [dit_tiny]}\n"
        "layouts:\n  - {name: a, scale: 1n1c, batch: 2, model: [llama_tiny]}\n"
    )
    with pytest.raises(SuiteError, match="not on the model axis"):
        parse_suite(text, "x.yaml")
