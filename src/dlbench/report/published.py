"""Published reference figures set beside measured points.

A reference row applies to a section's row when model, precision and per-device batch match. It is shown
with its hardware; a ratio measured / published is computed only when the hardware matches the measured
point's `device_model` identity key, the device counts match, and the data source is the same (or not
published). Otherwise the figures stand side by side and the reader is told why there is no ratio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlbench import reference
from dlbench.reference import ReferenceRow
from dlbench.report.groups import Cell, Column, Section
from dlbench.store.store import StoredPoint

_NOISE = re.compile(r"\b(nvidia|tesla|geforce|amd|intel|corporation|r)\b|[^a-z0-9]+")


def hardware_token(name: str) -> str:
    """'NVIDIA Tesla V100-SXM2-16GB' -> 'v100sxm216gb': vendor words and punctuation dropped."""
    return _NOISE.sub("", name.lower())


def same_hardware(published: str, measured: str) -> bool:
    """Whether a reference's hardware names the measured device (the reference may be less specific)."""
    a, b = hardware_token(published), hardware_token(measured)
    return bool(a) and bool(b) and (a == b or b.startswith(a))


@dataclass(frozen=True)
class Beside:
    """A published figure and, where one applies, the measured point of the same framework and scale."""

    ref: ReferenceRow
    measured: StoredPoint | None
    ratio: float | None
    why_no_ratio: str

    @property
    def measured_throughput(self) -> float | None:
        """The measured throughput beside the published one, if any."""
        m = self.measured.result.metrics if self.measured else None
        return m.throughput if m else None


def _measured(sec: Section, ref: ReferenceRow) -> Cell | None:
    hits = [
        c
        for (row, col), c in sec.cells.items()
        if c.ok
        and col.framework == ref.framework
        and row.batch_size == ref.batch_size
        and row.devices == ref.devices
        and col == Column(col.framework)
    ]
    return hits[-1] if hits else None


def beside(sec: Section) -> list[Beside]:
    """Every published row that applies to one of the section's batch sizes, with a ratio where fair."""
    if sec.precision not in reference.PRECISIONS:
        return []
    out = []
    for bs in sec.batches:
        for ref in reference.find(sec.model, sec.precision, bs):
            cell = _measured(sec, ref)
            if cell is None:
                out.append(Beside(ref, None, None, f"no {ref.framework} point at {ref.devices} device(s)"))
                continue
            device = cell.point.result.env.identity.get("device_model", "")
            m = cell.point.result.metrics
            if not same_hardware(ref.hardware, device):
                why = f"other hardware ({device or 'unknown'})"
            elif ref.data is not None and ref.data != sec.data:
                why = f"published with {ref.data} data"
            else:
                why = ""
            ratio = m.throughput / ref.throughput if m and not why else None
            out.append(Beside(ref, cell.point, ratio, why))
    out.sort(key=lambda b: (b.ref.source.file, b.ref.devices, b.ref.framework, b.ref.index))
    return out
