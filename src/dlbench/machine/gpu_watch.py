"""What NVML says about a point's own GPUs while it runs: each device's memory, the processes on it, its clocks,
temperature and power while measured, and the energy of the measured windows. Never imports a framework; an
NVML call that fails is counted and skipped, and sampling goes on.

- **Devices.** Only the devices the point's ranks use, matched by CUDA ordinal among the visible GPUs (a rank's
  is its local rank modulo the visible GPUs; a single process over N devices, TF ``mirrored``, uses the first
  N) and named by UUID. Memory is per device, never summed over devices.
- **Memory.** A device's figure is the memory NVML attributes to the point's own processes on it
  (``nvml_process``). Where NVML lists none of them (a container with its own PID namespace: NVML reports host
  PIDs), the rise of the device's used memory (``nvml_device_delta``) is taken only when the device was idle
  before the point started (no process listed, at most BUSY_BYTES used) and NVML never listed more processes on
  it than the point's ranks there: then the rise can only be the point's. Otherwise the memory is ``unknown
  (container)``, never another job's growth.
- **Clocks, temperature, power** are sampled only between a measured window's edges, so they are the clocks
  the measurement ran at, not the idle clocks after it.
- **Energy** is NVML's total-energy counter (millijoules, Volta and later) read at each window's edges, summed
  over the devices; where a device has no counter, its power samples are integrated (``nvml_power_integrated``).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.machine.energy import integrate_power
from dlbench.machine.nvml import _text, session, visible_handles
from dlbench.machine.telemetry import BUSY_BYTES, DeviceIdle, Spread

UNKNOWN_CONTAINER = "unknown (container)"
_PROCESS_GETTERS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")


@dataclass
class Slot:
    """One GPU the point uses, the ranks on it, and what was sampled on it."""

    index: int
    handle: Any
    ranks: tuple[int, ...]
    uuid: str = ""
    base_used: int | None = None
    base_procs: int | None = None
    peak_own: int = 0
    matched: bool = False
    peak_used: int | None = None
    most_listed: int = 0
    window_listed: int = 0  # most processes listed at once while measured
    window_foreign: int = 0  # ... of which not the point's own
    energy_mj: float = 0.0
    energy_start: int | None = None
    counter: bool = True
    power: list[tuple[float, float]] = field(default_factory=list)  # (seconds, watts) while measured

    @property
    def label(self) -> str:
        """'0 (GPU-3f2a...)'."""
        return f"{self.index} ({self.uuid})" if self.uuid else str(self.index)


def rank_devices(
    visible: int, processes: int, devices_per_node: int, ranks: Iterable[tuple[int, int]]
) -> dict[int, tuple[int, ...]]:
    """CUDA ordinal -> the ranks using it, for (rank, local rank) pairs: a rank's device is its local rank
    modulo the visible devices; a single process over several devices uses the first devices_per_node."""
    if visible <= 0:
        return {}
    out: dict[int, tuple[int, ...]] = {}
    for rank, local in ranks:
        ordinals = (
            range(min(devices_per_node, visible)) if processes == 1 and devices_per_node > 1 else (local % visible,)
        )
        for i in ordinals:
            out[i] = (*out.get(i, ()), rank)
    return out


class GpuSampler:
    """Samples the point's GPUs from a thread (memory always; clocks and power between window edges)."""

    def __init__(
        self,
        nv: Any,
        devices: dict[int, tuple[int, ...]],
        is_own: Callable[[int], bool],
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        visible: Sequence[Any] | None = None,
    ) -> None:
        self.nv = nv
        self.is_own = is_own
        self.interval_s = interval_s
        self.clock = clock
        self.errors = 0
        self.error = ""
        self.unsupported: set[tuple[int, str]] = set()
        handles = list(visible) if visible is not None else (self._call("the device list", visible_handles, nv) or [])
        self.slots = [Slot(i, handles[i], ranks) for i, ranks in sorted(devices.items()) if i < len(handles)]
        for s in self.slots:
            s.uuid = _text(self._call("the UUID", nv.nvmlDeviceGetUUID, s.handle) or "")
        self.samples: dict[str, list[float]] = {"sm_mhz": [], "mem_mhz": [], "temperature_c": [], "power_w": []}
        self.measuring = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- NVML calls that never stop the sampler ------------------------------------------------------------
    def _call(self, what: str, fn: Any, *args: Any, slot: Slot | None = None) -> Any:
        key = (slot.index if slot else -1, what)
        if key in self.unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if type(exc).__name__ == "NVMLError_NotSupported":
                self.unsupported.add(key)
            else:
                self.errors += 1
                self.error = f"{what}: {type(exc).__name__}: {exc}"[:200]
            return None

    def _processes(self, s: Slot) -> list[Any] | None:
        out: list[Any] = []
        for getter in _PROCESS_GETTERS:
            procs = self._call(f"the processes ({getter})", getattr(self.nv, getter), s.handle, slot=s)
            if procs is None and getter == _PROCESS_GETTERS[0]:
                return None
            out += procs or []
        return out

    def _used(self, s: Slot) -> int | None:
        mem = self._call("the memory", self.nv.nvmlDeviceGetMemoryInfo, s.handle, slot=s)
        return None if mem is None else int(mem.used)

    # -- the point's life -------------------------------------------------------------------------------
    def idle_check(self) -> tuple[DeviceIdle, ...]:
        """Each device before the point starts: processes listed on it and memory in use (the fallback's base)."""
        for s in self.slots:
            procs = self._processes(s)
            s.base_procs = None if procs is None else len(procs)
            s.base_used = self._used(s)
        return self.idle()

    def idle(self) -> tuple[DeviceIdle, ...]:
        """The idle check's findings."""
        return tuple(DeviceIdle(s.label, s.base_procs, s.base_used) for s in self.slots)

    def sample(self) -> None:
        """One sample of every device: memory and processes; clocks, temperature and power while measured."""
        now = self.clock()
        for s in self.slots:
            procs = self._processes(s)
            if procs is not None:
                own = [p for p in procs if self.is_own(int(p.pid))]
                if own:
                    s.matched = True
                    s.peak_own = max(s.peak_own, sum(int(p.usedGpuMemory or 0) for p in own))
                s.most_listed = max(s.most_listed, len(procs))
                if self.measuring:
                    s.window_listed = max(s.window_listed, len(procs))
                    s.window_foreign = max(s.window_foreign, len(procs) - len(own))
            used = self._used(s)
            if used is not None:
                s.peak_used = used if s.peak_used is None else max(s.peak_used, used)
            if self.measuring:
                self._sample_clocks(s, now)

    def _sample_clocks(self, s: Slot, now: float) -> None:
        nv = self.nv
        for name, value in (
            ("sm_mhz", self._call("the SM clock", nv.nvmlDeviceGetClockInfo, s.handle, nv.NVML_CLOCK_SM, slot=s)),
            ("mem_mhz", self._call("the memory clock", nv.nvmlDeviceGetClockInfo, s.handle, nv.NVML_CLOCK_MEM, slot=s)),
            (
                "temperature_c",
                self._call("the temperature", nv.nvmlDeviceGetTemperature, s.handle, nv.NVML_TEMPERATURE_GPU, slot=s),
            ),
        ):
            if value is not None:
                self.samples[name].append(float(value))
        mw = self._call("the power", nv.nvmlDeviceGetPowerUsage, s.handle, slot=s)
        if mw is not None:
            self.samples["power_w"].append(mw / 1000)
            s.power.append((now, mw / 1000))

    def edge(self, which: str) -> None:
        """A measured window's start or end: the energy counters, a sample, and clocks on or off."""
        with self._lock:
            if which == "start":
                self.measuring = True
            for s in self.slots:
                if s.counter:
                    mj = self._call("the energy counter", self.nv.nvmlDeviceGetTotalEnergyConsumption, s.handle, slot=s)
                    if mj is None:
                        s.counter = False
                    elif which == "start":
                        s.energy_start = int(mj)
                    elif s.energy_start is not None:
                        s.energy_mj += int(mj) - s.energy_start
                        s.energy_start = None
            self.sample()
            if which == "end":
                self.measuring = False
                for s in self.slots:
                    s.power.append((float("nan"), 0.0))  # a gap: windows are integrated one by one

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                self.sample()

    def start(self) -> GpuSampler:
        """Start the sampling thread."""
        self._thread = threading.Thread(target=self._run, name="dlbench-gpu-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (after one last sample)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self.sample()

    # -- what was found -----------------------------------------------------------------------------------
    def memory(self, s: Slot) -> tuple[int | None, str]:
        """One device's peak memory for the point, and its kind (see the module's docstring)."""
        if s.matched:
            return s.peak_own, "nvml_process"
        if s.peak_used is None:
            return None, "unknown"
        alone = s.most_listed <= len(s.ranks) and not s.base_procs
        if alone and s.base_used is not None and s.base_used <= BUSY_BYTES:
            return max(0, s.peak_used - s.base_used), "nvml_device_delta"
        return None, UNKNOWN_CONTAINER

    def rank_memory(self, rank: int) -> tuple[int | None, str]:
        """A rank's peak memory: its device's, or the largest of its devices (one process over several)."""
        found = [self.memory(s) for s in self.slots if rank in s.ranks]
        known = [f for f in found if f[0] is not None]
        if known:
            return max(known)
        return found[0] if found else (None, "unknown")

    def other_processes(self) -> int | None:
        """Most processes outside the point on one of its GPUs at once, while measured (None if never listed)."""
        if not self.slots:
            return None
        return max((s.window_foreign if s.matched else max(0, s.window_listed - len(s.ranks))) for s in self.slots)

    def clocks(self) -> dict[str, Spread]:
        """Min, median and max of each quantity sampled while measured, over the point's devices."""
        return {k: spread for k, v in self.samples.items() if (spread := Spread.of(v)) is not None}

    def energy(self) -> tuple[float | None, str, str]:
        """(joules over the measured windows summed over the devices, source, reason when unavailable)."""
        if not self.slots:
            return None, "unavailable", "no GPU of the point was found through NVML"
        total, sources = 0.0, set()
        for s in self.slots:
            if s.counter:
                total += s.energy_mj / 1000
                sources.add("nvml_energy_counter")
                continue
            windows: list[list[tuple[float, float]]] = []
            current: list[tuple[float, float]] = []
            for t, w in s.power:
                if math.isnan(t):  # the gap after a window
                    windows.append(current)
                    current = []
                else:
                    current.append((t, w))
            if not any(len(w) > 1 for w in windows):
                return None, "unavailable", f"GPU {s.label} has no energy counter and too few power samples"
            total += sum(integrate_power(w) for w in windows)
            sources.add("nvml_power_integrated")
        return total, "+".join(sorted(sources)), ""


@contextlib.contextmanager
def gpu_sampler(
    devices: dict[int, tuple[int, ...]], is_own: Callable[[int], bool], interval_s: float = 0.1
) -> Iterator[GpuSampler | None]:
    """A GpuSampler inside an NVML session, its idle check done and its thread started; None without NVML."""
    with session() as nv:
        if nv is None:
            yield None
            return
        sampler = GpuSampler(nv, devices, is_own, interval_s)
        sampler.idle_check()
        sampler.start()
        try:
            yield sampler
        finally:
            sampler.stop()


__all__ = ["UNKNOWN_CONTAINER", "GpuSampler", "Slot", "gpu_sampler", "rank_devices"]
