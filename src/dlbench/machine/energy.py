"""The CPU's energy counters: RAPL through the kernel's powercap interface (/sys/class/powercap).

Each top-level zone ``intel-rapl:N`` is one CPU package (AMD's Zen CPUs expose theirs under the same name);
its ``energy_uj`` counts microjoules and wraps at ``max_energy_range_uj``. Sub-zones (``intel-rapl:N:M``: cores,
DRAM) are inside their package and are not added again. Since Linux 5.10 ``energy_uj`` is readable by root only
(a side channel), so a user's run usually reads ``unavailable`` with that reason; so does a VM, which exposes no
RAPL at all. A package counter includes every process on the package: the contention figure says how much of it
was others'.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class RaplZone:
    """One package's energy counter."""

    name: str
    energy: Path
    max_range_uj: int


def rapl_zones(root: Path = POWERCAP) -> tuple[list[RaplZone], str]:
    """The readable package zones, or ([], why not)."""
    if not root.is_dir():
        return [], f"no {root} (this kernel or VM exposes no RAPL energy counter)"
    zones, problems = [], []
    for d in sorted(root.glob("*-rapl:*")):
        if d.name.count(":") != 1:  # a sub-zone (cores, DRAM) is part of its package
            continue
        energy = d / "energy_uj"
        try:
            int(energy.read_text())
            top = int((d / "max_energy_range_uj").read_text())
        except PermissionError:
            problems.append(f"{energy} is not readable (root only since Linux 5.10)")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"cannot read {energy}: {exc}")
            continue
        zones.append(RaplZone(d.name, energy, top))
    if zones:
        return zones, ""
    return [], problems[0] if problems else f"no RAPL package zone under {root}"


class RaplMeter:
    """Joules of the CPU packages over measured windows, read at each window's edges."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.zones, self.reason = rapl_zones(root)
        self.joules = 0.0
        self._start: list[int] | None = None

    @property
    def available(self) -> bool:
        """Whether any package counter can be read."""
        return bool(self.zones)

    def _read(self) -> list[int]:
        return [int(z.energy.read_text()) for z in self.zones]

    def edge(self, which: str) -> None:
        """A window's start or end: the energy between them is added, a counter's wrap included."""
        if not self.zones:
            return
        try:
            now = self._read()
        except (OSError, ValueError) as exc:
            self.zones, self.reason = [], f"RAPL stopped answering: {exc}"[:200]
            return
        if which == "start":
            self._start = now
            return
        if self._start is None:
            return
        for z, a, b in zip(self.zones, self._start, now):
            self.joules += ((b - a) if b >= a else (b + z.max_range_uj - a)) / 1e6
        self._start = None


def integrate_power(samples: list[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples by the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(samples))


__all__ = ["POWERCAP", "RaplMeter", "RaplZone", "integrate_power", "rapl_zones"]
