"""The GPU peak table: V100S and MIG slices get their own rows."""

from __future__ import annotations

import pytest

from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol

H100 = "NVIDIA H100 80GB HBM3"


def test_peak_table_v100s_and_mig_slices() -> None:
    """V100S has its own row (16.4 fp32 / 130 fp16 TFLOP/s, not the V100 PCIe's 14 / 112); a MIG slice gets its
    profile's share of its card's compute (1g of 7 on an H100), and a card in MIG mode under a name without a
    profile (no CUDA_VISIBLE_DEVICES=MIG-...) gets no peak, never the whole card's: MFU reads unknown, saying so."""
    from dlbench.analysis.mfu import efficiency
    from dlbench.machine.peaks import gpu_peak
    from dlbench.protocol.stats import summarize
    from dlbench.records import Environment

    v100s = {m: gpu_peak("Tesla V100S-PCIE-32GB", m).peak for m in ("fp32", "fp16")}
    assert {m: (p.tflops, p.device) for m, p in v100s.items() if p} == {
        "fp32": (16.4, "V100S PCIe"),
        "fp16": (130.0, "V100S PCIe"),
    }
    assert v100s["fp32"] is not None and v100s["fp32"].source.startswith("https://")
    pcie = gpu_peak("Tesla V100-PCIE-32GB", "fp32").peak
    assert pcie is not None and pcie.tflops == 14.0
    for name, mode, share in (
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", 989.5 / 7),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "tf32", 156.0 * 3 / 7),
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "fp16", 312.0 / 7),
    ):
        found = gpu_peak(name, mode).peak
        assert found is not None and found.tflops == pytest.approx(share) and "/7 of its compute" in found.device, name
    whole = gpu_peak(H100, "bf16", mig="on")
    assert whole.peak is None and "MIG is on" in whole.reason and "CUDA_VISIBLE_DEVICES=MIG-" in whole.reason
    assert gpu_peak("NVIDIA L40S MIG 1g.12gb", "fp32").peak is None  # a card the table gives no MIG slices

    spec = PointSpec(
        framework="mxnet", model="resnet50", batch_size=64, protocol=Protocol(1, 4, 2, "median"), device="cuda"
    )
    ranks = (RankRaw(0, tuple(RepeatRaw((0.1,) * 4, 0.4) for _ in range(2))),)
    env = Environment(
        identity={"device": "cuda", "device_model": H100, "math_mode": "fp32"},
        descriptive={"gpu_mig": "on", "hostname": "gpu-box"},
    )
    eff = efficiency(PointResult(spec, "ok", ranks, summarize(spec, ranks), env))
    assert eff.achieved_tflops is not None and eff.mfu is None and "MIG is on" in eff.note
