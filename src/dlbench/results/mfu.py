"""Achieved TFLOP/s and model-FLOPs utilisation of a point, derived at read time from what the store keeps.

achieved FLOP/s = throughput (global samples/s, protocol/stats.py) x training FLOPs per sample (cases/flops.py);
MFU = achieved / (peak of one device in the point's math mode x the devices the point trained on). The math
mode is the one the backend reported (``math_mode``, e.g. fp32 that ran as tf32), else the precision's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.cases import UnknownCase, get_case
from dlbench.numerics import resolve_precision
from dlbench.results.peaks import Peak, peak_for
from dlbench.results.schema import PointResult
from dlbench.spec import SpecError


@dataclass(frozen=True)
class Efficiency:
    """A point's FLOPs per sample, achieved TFLOP/s, its device peak and MFU; `note` says what is unknown."""

    math_mode: str
    flops_per_sample: float | None = None
    achieved_tflops: float | None = None
    peak: Peak | None = None
    devices: int = 1
    mfu: float | None = None
    note: str = ""

    @property
    def peak_tflops(self) -> float | None:
        """Peak TFLOP/s of all the point's devices together (per-device peak x devices), None when unknown."""
        return None if self.peak is None else self.peak.tflops * self.devices

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able figures: flops, achieved, peak (and its kind and source), MFU, note."""
        p = self.peak
        return {"math_mode": self.math_mode, "train_flops_per_sample": self.flops_per_sample,
                "achieved_tflops": self.achieved_tflops, "peak_tflops_per_device": p.tflops if p else None,
                "peak_kind": p.kind if p else None, "peak_device": p.device if p else None,
                "peak_source": p.source if p else None, "devices": self.devices, "mfu": self.mfu,
                "note": self.note}


def math_mode(r: PointResult) -> str:
    """The math mode the point ran in: the backend's report, else its precision's on its device."""
    reported = r.env.identity.get("math_mode", "")
    return reported if reported else resolve_precision(r.spec.precision, r.spec.device).math_mode


def flops_per_sample(r: PointResult) -> float | None:
    """Training FLOPs of one sample of the point's case, input size and case parameters; None if not countable."""
    try:
        case = get_case(r.spec.model).configured(dict(r.spec.case_params))
        return case.train_flops_per_sample(r.spec.input_size)
    except (UnknownCase, SpecError, TypeError):
        return None


def efficiency(r: PointResult) -> Efficiency:
    """Achieved TFLOP/s and MFU of a point (None where its status, FLOP count or device peak leaves them open)."""
    mode = math_mode(r)
    flops = flops_per_sample(r)
    if flops is None:
        return Efficiency(mode, note=f"no FLOP count for {r.spec.model}")
    m = r.metrics
    if r.status != "ok" or m is None:
        return Efficiency(mode, flops, note=r.status)
    achieved, devices = m.throughput * flops / 1e12, r.spec.world_size
    found = peak_for(r.spec.device, r.env.identity.get("device_model", ""), mode,
                     r.env.descriptive.get("hostname", ""), achieved / devices, r.env.descriptive.get("gpu_mig", ""))
    if found.peak is None:
        return Efficiency(mode, flops, achieved, devices=devices, note=found.reason)
    mfu = achieved / (found.peak.tflops * devices)
    note = "" if mfu <= 1 else (f"above the {found.peak.kind} peak: a probe under load reads low; "
                                "it rises with later probes on a quieter machine" if found.peak.kind == "measured"
                                else "above the datasheet peak: check the FLOP count and the device")
    return Efficiency(mode, flops, achieved, found.peak, devices, mfu, note)


def fmt_tflops(e: Efficiency) -> str:
    """'12.3' achieved TFLOP/s, '-' when unknown."""
    return "-" if e.achieved_tflops is None else f"{e.achieved_tflops:,.3g}"


def fmt_mfu(e: Efficiency) -> str:
    """'41.2% (datasheet)' / '63% (measured)', 'peak unknown' where the device peak is, '-' when not measured."""
    if e.mfu is not None and e.peak is not None:
        return f"{e.mfu:.1%} ({e.peak.kind})"
    return "peak unknown" if e.achieved_tflops is not None else "-"


def peak_notes(effs: list[Efficiency]) -> list[str]:
    """One line per distinct device peak the MFUs divide by, and one per distinct reason a peak is unknown."""
    seen: dict[str, None] = {}
    for e in effs:
        if e.peak is not None:
            seen[f"MFU against {e.peak.label}: {e.peak.source}"] = None
        if e.achieved_tflops is not None and e.note:
            seen[e.note] = None
    return list(seen)


__all__ = ["Efficiency", "efficiency", "flops_per_sample", "fmt_mfu", "fmt_tflops", "math_mode", "peak_notes"]
