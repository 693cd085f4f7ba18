"""Decoder figures that hold up (#35): tokens/s and per device, TFLOP/s per device by the case's named FLOP
convention (Llama: 6N + half the causal attention; GPT keeps Megatron's), MFU against the peak of the math mode
that ran and against the BF16 dense peak beside it, none where the peak is unknown, and memory per device.
Points are built with constant step times so that every figure is exact."""

from __future__ import annotations

import json

import pytest

from dlbench.analysis.llm import MEGATRON, llm_figures
from dlbench.cases import get_case
from dlbench.cases.gpt import megatron_flops_per_sample
from dlbench.report.export import to_json
from dlbench.store.store import StoredPoint
from tests.support.reports import llm_point as _point


def test_llama_figures_are_exact_and_name_their_convention() -> None:
    r = _point("llama3_8b", 2.0, 8, "bf16", fsdp=True)
    f = llm_figures(r)
    assert f is not None
    sequences_per_s = 2 * 8 / 2.0  # global batch 16 every 2 s
    assert f.tokens_per_s == pytest.approx(sequences_per_s * 8192)
    assert f.tokens_per_s_per_device == pytest.approx(sequences_per_s * 8192 / 8)
    per_device = sequences_per_s * get_case("llama3_8b").train_flops_per_sample() / 8 / 1e12
    assert f.model_tflops_per_device == pytest.approx(per_device) == f.hardware_tflops_per_device
    assert f.mfu == pytest.approx(per_device / 989.5) and f.mfu_bf16 == pytest.approx(per_device / 989.5)
    assert "causal attention counted as half" in f.flop_convention
    assert f.memory_per_device_bytes == 40 * 2**30 and f.memory_kind == "nvml_used"


def test_mfu_of_the_precision_that_ran_and_bf16_beside_it() -> None:
    f = llm_figures(_point("llama_tiny", 0.001, 1, "fp32"))
    assert f is not None and f.mfu is not None and f.mfu_bf16 is not None
    assert f.mfu == pytest.approx(f.model_tflops_per_device / 67.0)  # the fp32 (CUDA-core) dense peak
    assert f.mfu_bf16 == pytest.approx(f.model_tflops_per_device / 989.5)
    assert f.bf16_peak_tflops_per_device == pytest.approx(989.5)


def test_no_mfu_where_the_peak_is_unknown() -> None:
    f = llm_figures(_point("llama_tiny", 0.001, 1, "bf16", gpu="NVIDIA A2"))
    assert f is not None and f.tokens_per_s > 0
    assert f.mfu is None and f.mfu_bf16 is None and f.bf16_peak_tflops_per_device is None
    assert "peak unknown" in f.peak_note


def test_gpt_keeps_megatron_and_recompute_counts_hardware() -> None:
    f = llm_figures(_point("gpt", 0.5, 2, "bf16", recompute=True))
    assert f is not None and f.flop_convention == MEGATRON
    case = get_case("gpt")  # a second forward of the layers, not of the logits: below 4/3
    ratio = megatron_flops_per_sample(case, recompute=True) / megatron_flops_per_sample(case)
    assert f.hardware_tflops_per_device / f.model_tflops_per_device == pytest.approx(ratio) and 1.2 < ratio < 4 / 3
    llama = llm_figures(_point("llama_tiny", 0.5, 1, "bf16", recompute=True))
    assert llama is not None
    assert llama.hardware_tflops_per_device == pytest.approx(llama.model_tflops_per_device * 4 / 3)
    assert llm_figures(_point("resnet50", 0.5, 1, "bf16")) is None


def test_the_points_json_carries_the_figures() -> None:
    points = [
        StoredPoint(1, "run1", _point("llama3_1b", 1.0, 1, "bf16")),
        StoredPoint(2, "run1", _point("resnet50", 1.0, 1, "bf16")),
    ]
    rows = json.loads(to_json(points))
    assert rows[0]["llm"]["flop_convention"].startswith("6N")
    assert rows[0]["llm"]["tokens_per_s"] == pytest.approx(2 * 8192)
    assert rows[1]["llm"] is None
