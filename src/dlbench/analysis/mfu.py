"""Achieved TFLOP/s and model-FLOPs utilisation of a point, against the peak stored with it.

achieved FLOP/s = throughput (global samples/s, protocol/stats.py) x training FLOPs per sample (cases/flops.py);
MFU = achieved / (peak of one device in the point's math mode x the devices the point trained on). The math
mode is the one the backend reported (``math_mode``, e.g. fp32 that ran as tf32), else the precision's.

The peak is stored with the point when it is recorded (``extra["peak"]``: value per device, math mode, kind,
device, source, when; `stored_peak`), so that a stored point's MFU never changes when read. A point stored
before peaks were kept has its peak looked up when read from the two sources that cannot drift (the GPU's
datasheet row, or this host's CPU instruction-set peak when the point was measured on this host), and says so;
never from a GEMM probe. On a CPU the probe's rate is kept beside the peak as *achievable*. Achieved FLOP/s
above the peak is said in words (the framework does less arithmetic than the model's count), never printed as an
MFU over 100%.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dlbench.cases import UnknownCase, get_case
from dlbench.machine.env import cpu_model
from dlbench.machine.peaks import Achievable, Peak, PeakLookup, cpu_achievable, peak_for
from dlbench.numerics import resolve_precision
from dlbench.records import PointResult
from dlbench.spec import PointSpec, SpecError

PEAK_KEY = "peak"  # the key of a point's extra that holds the peak it was judged against
LOOKED_UP = "peak looked up when read: the point was stored before peaks were kept"
ABOVE_PEAK = (
    "achieved FLOP/s above the peak: the framework does less arithmetic than the model's FLOP count "
    "(e.g. Winograd or FFT convolutions), or ran above the clock the peak assumes; no MFU is given"
)


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
    achievable: Achievable | None = None  # a GEMM probe's rate on a CPU: beside the peak, never the peak
    recorded: float | None = None  # when the peak was stored with the point; None: looked up when read
    above_peak: bool = False  # achieved more than the peak: no MFU, said in words

    @property
    def peak_tflops(self) -> float | None:
        """Peak TFLOP/s of all the point's devices together (per-device peak x devices), None when unknown."""
        return None if self.peak is None else self.peak.tflops * self.devices

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able figures: flops, achieved, peak (and its kind and source), MFU, note."""
        p = self.peak
        return {
            "math_mode": self.math_mode,
            "train_flops_per_sample": self.flops_per_sample,
            "achieved_tflops": self.achieved_tflops,
            "peak_tflops_per_device": p.tflops if p else None,
            "peak_kind": p.kind if p else None,
            "peak_device": p.device if p else None,
            "peak_source": p.source if p else None,
            "peak_recorded": self.recorded,
            "devices": self.devices,
            "mfu": self.mfu,
            "above_peak": self.above_peak,
            "achievable_tflops": self.achievable.tflops if self.achievable else None,
            "achievable_source": self.achievable.source if self.achievable else None,
            "note": self.note,
        }


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


def cores_per_device(spec: PointSpec, physical: int) -> float:
    """Physical cores one device (rank) of a CPU point was given: its threads, at most the node's cores split
    between its ranks; 0 for a GPU point."""
    if spec.device != "cpu":
        return 0.0
    node = min(physical, spec.threads * spec.devices_per_node) if spec.threads else physical
    return node / spec.devices_per_node


def _lookup(spec: PointSpec, identity: dict[str, str], descriptive: dict[str, str], mode: str) -> PeakLookup:
    cores = cores_per_device(spec, int(identity.get("cpu_cores", "0") or 0))
    mig = identity.get("gpu_mig") or descriptive.get("gpu_mig", "")
    return peak_for(spec.device, identity.get("device_model", ""), mode, descriptive.get("hostname", ""), cores, mig)


def stored_peak(spec: PointSpec, identity: dict[str, str], descriptive: dict[str, str]) -> dict[str, object]:
    """The peak a point is judged against, to store with it when it is recorded (and the achievable GEMM rate
    beside it on a CPU): JSON-able, read back by `efficiency`."""
    mode = identity.get("math_mode") or resolve_precision(spec.precision, spec.device).math_mode
    found = _lookup(spec, identity, descriptive, mode)
    ach = cpu_achievable(cpu_model(), mode) if spec.device == "cpu" and found.peak is not None else None
    p = found.peak
    return {
        "tflops": p.tflops if p else None,
        "math_mode": mode,
        "kind": p.kind if p else None,
        "device": p.device if p else None,
        "source": p.source if p else None,
        "reason": found.reason,
        "recorded": time.time(),
        "achievable_tflops": ach.tflops if ach else None,
        "achievable_source": ach.source if ach else None,
    }


def _from_store(d: dict[str, object]) -> tuple[PeakLookup, Achievable | None, float | None]:
    """The stored peak record read back (a malformed one reads as unknown, naming why)."""
    try:
        when = float(d["recorded"])  # type: ignore[arg-type]
        ach = (
            Achievable(float(d["achievable_tflops"]), str(d.get("achievable_source", "")))  # type: ignore[arg-type]
            if d.get("achievable_tflops") is not None
            else None
        )
        if d.get("tflops") is None:
            return PeakLookup(None, str(d.get("reason") or "peak unknown")), ach, when
        peak = Peak(
            float(d["tflops"]),  # type: ignore[arg-type]
            str(d["math_mode"]),
            d["kind"],  # type: ignore[arg-type]
            str(d["device"]),
            str(d["source"]),
        )
        return PeakLookup(peak), ach, when
    except (KeyError, TypeError, ValueError) as exc:
        return PeakLookup(None, f"peak unknown: the stored peak record is malformed ({exc})"), None, None


def efficiency(r: PointResult) -> Efficiency:
    """Achieved TFLOP/s and MFU of a point against its stored peak (None where its status, FLOP count or device
    peak leaves them open)."""
    mode = math_mode(r)
    flops = flops_per_sample(r)
    if flops is None:
        return Efficiency(mode, note=f"no FLOP count for {r.spec.model}")
    m = r.metrics
    if r.status != "ok" or m is None:
        return Efficiency(mode, flops, note=r.status)
    achieved, devices = m.throughput * flops / 1e12, r.spec.world_size
    stored = r.extra.get(PEAK_KEY)
    if isinstance(stored, dict):
        found, ach, when = _from_store(stored)
    else:
        found, ach, when = _lookup(r.spec, r.env.identity, r.env.descriptive, mode), None, None
    if found.peak is None:
        return Efficiency(mode, flops, achieved, devices=devices, note=found.reason, achievable=ach, recorded=when)
    ratio = achieved / (found.peak.tflops * devices)
    note = "" if when is not None else LOOKED_UP
    if ratio > 1:
        return Efficiency(
            mode,
            flops,
            achieved,
            found.peak,
            devices,
            None,
            "; ".join(t for t in (ABOVE_PEAK, note) if t),
            ach,
            when,
            above_peak=True,
        )
    return Efficiency(mode, flops, achieved, found.peak, devices, ratio, note, ach, when)


def fmt_tflops(e: Efficiency) -> str:
    """'12.3' achieved TFLOP/s (three significant digits; whole from 1,000 on: '1,234', never '1.23e+03'), '-'
    when unknown."""
    if e.achieved_tflops is None:
        return "-"
    return f"{e.achieved_tflops:,.0f}" if abs(e.achieved_tflops) >= 999.5 else f"{e.achieved_tflops:,.3g}"


def fmt_mfu(e: Efficiency) -> str:
    """'41.2% (datasheet)' / '63% (ISA)', 'above peak' where achieved exceeds it, 'peak unknown' where the device
    peak is, '-' when not measured."""
    if e.mfu is not None and e.peak is not None:
        return f"{e.mfu:.1%} ({'ISA' if e.peak.kind == 'instruction set' else e.peak.kind})"
    if e.above_peak:
        return "above peak"
    return "peak unknown" if e.achieved_tflops is not None else "-"


def peak_notes(effs: list[Efficiency]) -> list[str]:
    """One line per distinct device peak the MFUs divide by (and the achievable rate beside it), and one per
    distinct reason a peak is unknown or an MFU is not given."""
    seen: dict[str, None] = {}
    for e in effs:
        if e.peak is not None:
            seen[f"MFU against {e.peak.label}: {e.peak.source}"] = None
        if e.achievable is not None:
            seen[
                f"achievable here (not the peak): {e.achievable.tflops:,.4g} TFLOP/s {e.math_mode}, "
                f"{e.achievable.source}"
            ] = None
        if e.achieved_tflops is not None and e.note:
            seen[e.note] = None
    return list(seen)


__all__ = [
    "ABOVE_PEAK",
    "LOOKED_UP",
    "PEAK_KEY",
    "Efficiency",
    "cores_per_device",
    "efficiency",
    "flops_per_sample",
    "fmt_mfu",
    "fmt_tflops",
    "math_mode",
    "peak_notes",
    "stored_peak",
]
