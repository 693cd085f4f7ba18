"""Published MoE training figures (#36): every row loads with its stack, GPU, layout, precision, figures, whether
force-balanced routing is stated, and an https source; the rows are the ones read from NeMo AutoModel's
performance summary."""

from __future__ import annotations

from dlbench.reference.moe import moe_anchors


def test_moe_anchors_load_with_their_sources() -> None:
    rows = moe_anchors()
    assert rows and all(a.source.startswith("https://") for a in rows)
    assert all(a.balanced in ("yes", "no", "not stated") for a in rows)
    by_name = {a.model_name: a for a in rows}
    nano = by_name["Nemotron V3 Nano 30B"]
    assert (nano.gpu, nano.gpus, nano.precision, nano.tokens_per_s_per_gpu, nano.tflops_per_gpu) == (
        "H100",
        8,
        "bf16",
        16789,
        328,
    )
    assert "EP8" in nano.layout
