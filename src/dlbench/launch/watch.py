"""The controller watches a point's workers from outside while they run: the CPU time others take from them, the
GPU memory, clocks and energy of their devices, and whether those devices were idle before the point started.

The worker prints a progress event at each measured repeat's first and last clock read (wire.edge_event); the
watcher reads the kernel's and NVML's counters there, outside the timed steps (a start edge only re-reads
counters of processes already found: well under a millisecond). The workers it watches are its own descendants
on this machine: every launcher that starts ranks here (local, and hosts/torchrun/mpirun without remote hosts).
A worker checks the same thing from its side (wire.watched_by_controller) and samples its own GPU memory only
when the controller cannot see it: ranks on other hosts, for which contention, clocks and energy are not
recorded (the telemetry says so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import psutil

from dlbench.launch.process import ProgressSink
from dlbench.machine.contention import (
    AUTO_PROBE_S,
    PROC_STAT,
    CpuWindows,
    affinity_cpus,
    auto_threads,
    others_share_now,
    tree,
    wait_quiet,
)
from dlbench.machine.energy import POWERCAP, RaplMeter
from dlbench.machine.env import physical_cores
from dlbench.machine.gpu_watch import GpuSampler, rank_devices
from dlbench.machine.nvml import session, visible_handles
from dlbench.machine.telemetry import Contention, Energy, Telemetry, ThreadChoice
from dlbench.spec import PointSpec
from dlbench.wire import CONTROLLER_MEMORY, EDGE_KEY, WorkerResult

REFRESH_S = 1.0  # how often warm-up progress may trigger a new look for the point's processes


def _is_worker(p: psutil.Process) -> bool:
    try:
        return "dlbench.worker" in p.cmdline()
    except psutil.Error:
        return False


class PointWatch:
    """Context manager around one point's launch; `sink` wraps the progress sink; `finish` gives the telemetry.

    With `place_threads` (its ranks run on this machine), a CPU point without --threads gets its thread count here,
    just before it starts (`--threads auto`: machine/contention.auto_threads); `run_spec` is the spec to launch.
    """

    def __init__(
        self,
        spec: PointSpec,
        wait_quiet_s: float = 0.0,
        price_per_hour: float | None = None,
        stat_path: Path = PROC_STAT,
        powercap: Path = POWERCAP,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        place_threads: bool = False,
    ) -> None:
        self.spec = spec
        self.run_spec = spec
        self.place_threads = place_threads
        self.threads: ThreadChoice | None = None
        self.wait_quiet_s = wait_quiet_s
        self.price_per_hour = price_per_hour
        self.me = psutil.Process()
        self.cpu = CpuWindows(self._own, stat_path)
        self.rapl = RaplMeter(powercap) if spec.device == "cpu" else None
        self.gpu: GpuSampler | None = None
        self.gpu_note = ""
        self.sleep = sleep
        self.clock = clock
        self.stat_path = stat_path
        self.saw_worker = False
        self.windows = 0
        self.window_s = 0.0
        self._window_start: float | None = None
        self._refreshed = 0.0
        self._own_cache: dict[int, bool] = {}
        self._stack = contextlib.ExitStack()
        self.waited: tuple[float, bool] | None = None

    # -- which processes are the point's --------------------------------------------------------------------
    def _own(self) -> list[psutil.Process]:
        procs = tree(self.me)
        self.saw_worker = self.saw_worker or any(_is_worker(p) for p in procs[1:])
        return procs

    def _is_own(self, pid: int) -> bool:
        if pid not in self._own_cache:
            try:
                self._own_cache[pid] = pid == self.me.pid or any(
                    a.pid == self.me.pid for a in psutil.Process(pid).parents()
                )
            except psutil.Error:  # gone, or a PID of another namespace that names nothing here
                self._own_cache[pid] = False
        return self._own_cache[pid]

    # -- around the launch --------------------------------------------------------------------------------
    def __enter__(self) -> PointWatch:
        if self.spec.device == "cuda":
            nv = self._stack.enter_context(session())
            if nv is None:
                self.gpu_note = "no NVML in the controller"
            else:
                try:
                    handles = visible_handles(nv)
                except Exception as exc:
                    handles, self.gpu_note = [], f"NVML could not list the GPUs: {type(exc).__name__}"
                ranks = [(r, r % self.spec.devices_per_node) for r in range(self.spec.processes)]
                devices = rank_devices(len(handles), self.spec.processes, self.spec.devices_per_node, ranks)
                self.gpu = GpuSampler(nv, devices, self._is_own, visible=handles)
        gpu = self.gpu
        if gpu is not None:
            gpu.idle_check()
        if self.wait_quiet_s > 0:

            def gpu_busy() -> bool:
                return gpu is not None and not all(d.idle for d in gpu.idle_check())

            self.waited = wait_quiet(
                self.wait_quiet_s,
                lambda: [self.me],
                gpu_busy,
                stat_path=self.stat_path,
                clock=self.clock,
                sleep=self.sleep,
            )
        if self.spec.device == "cpu":
            self._choose_threads()
        if gpu is not None:
            gpu.start()
        return self

    def _choose_threads(self) -> None:
        """Record the point's threads; for `--threads auto` on this machine, measure others' share and choose."""
        spec = self.spec
        cores = min(physical_cores(), len(affinity_cpus([self.me])))
        ranks = max(1, spec.processes // spec.nodes)
        if spec.threads is not None:
            self.threads = ThreadChoice(str(spec.threads), spec.threads, ranks, cores, reason="--threads")
        elif self.place_threads:
            share = others_share_now(lambda: tree(self.me), AUTO_PROBE_S, self.stat_path, self.sleep)
            self.threads = auto_threads(share, cores, ranks)
            self.run_spec = dataclasses.replace(spec, threads=self.threads.used)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self.gpu is not None:
            self.gpu.stop()
        self._stack.close()

    def sink(self, downstream: ProgressSink | None) -> ProgressSink:
        """The progress sink to give the launcher: window edges are read here, then every event goes on."""

        def on_event(event: dict[str, object]) -> None:
            edge = event.get(EDGE_KEY)
            if edge in ("start", "end"):
                self.edge(str(edge))
            elif event.get("phase") == "warmup" and time.monotonic() - self._refreshed > REFRESH_S:
                self._refreshed = time.monotonic()
                self.cpu.refresh()
            if downstream is not None:
                downstream(event)

        return on_event

    def edge(self, which: str) -> None:
        """One edge of a measured window: every counter is read."""
        now = time.monotonic()
        self.cpu.edge(which)
        if self.rapl is not None:
            self.rapl.edge(which)
        if self.gpu is not None:
            self.gpu.edge(which)
        if which == "start":
            self._window_start = now
        elif self._window_start is not None:
            self.window_s += now - self._window_start
            self.windows += 1
            self._window_start = None

    # -- what it found --------------------------------------------------------------------------------------
    def _energy(self, samples: int) -> Energy:
        devices = self.spec.world_size if self.spec.device == "cuda" else self.spec.nodes
        base = Energy(window_s=self.window_s, samples=samples, devices=devices, price_per_hour=self.price_per_hour)
        if not self.windows:
            return dataclasses.replace(base, reason="no measured window was seen")
        if self.gpu is not None:
            joules, source, reason = self.gpu.energy()
            return dataclasses.replace(base, joules=joules, source=source, reason=reason)
        if self.rapl is not None and self.rapl.available:
            return dataclasses.replace(base, joules=self.rapl.joules, source="rapl")
        reason = self.rapl.reason if self.rapl is not None else self.gpu_note
        return dataclasses.replace(base, reason=reason)

    def finish(self, worker: WorkerResult | None) -> tuple[Telemetry, WorkerResult | None]:
        """The point's telemetry, and the worker result with each rank's GPU memory filled in where the
        controller sampled it."""
        ranks = worker.ranks if worker is not None else []
        repeats = ranks[0].repeats if ranks else ()
        samples = self.spec.global_batch * sum(r.steps for r in repeats)
        if self.windows and not self.saw_worker:
            why = "the ranks ran where the controller cannot see them (another host)"
            tele = Telemetry(
                watcher="none",
                contention=Contention(note=why),
                energy=Energy(samples=samples, reason=why, price_per_hour=self.price_per_hour),
            )
            return tele, worker
        contention = self.cpu.result()
        if self.waited is not None:
            contention = dataclasses.replace(
                contention, waited_s=round(self.waited[0], 1), quiet_at_start=self.waited[1]
            )
        if self.threads is not None:
            contention = dataclasses.replace(contention, needed_share=self.threads.needed_share)
        gpu = self.gpu
        if gpu is not None:
            contention = dataclasses.replace(contention, gpu_other_processes=gpu.other_processes())
        tele = Telemetry(
            threads=self.threads,
            contention=contention,
            energy=self._energy(samples),
            clocks=gpu.clocks() if gpu is not None else {},
            idle=gpu.idle() if gpu is not None else (),
            nvml_errors=gpu.errors if gpu is not None else 0,
            nvml_error=gpu.error if gpu else "",
        )
        if worker is not None and any(r.memory_kind == CONTROLLER_MEMORY for r in worker.ranks):
            filled = []
            for r in worker.ranks:
                if r.memory_kind == CONTROLLER_MEMORY:
                    peak, kind = gpu.rank_memory(r.rank) if gpu is not None else (None, "unknown")
                    r = dataclasses.replace(r, peak_memory_bytes=peak, memory_kind=kind)
                filled.append(r)
            worker = worker.model_copy(update={"ranks": filled})
        return tele, worker


__all__ = ["PointWatch"]
