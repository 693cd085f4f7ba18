"""How much of the point's CPUs other processes used while it was measured, from the kernel's own counters.

At each measured window's two edges the controller reads /proc/stat (the busy and total time of each CPU the
point may run on, its affinity) and the CPU time of the point's own processes (/proc/PID/stat through psutil).
Others' share = (busy time - own time) / total time, summed over the windows. Busy is user, nice, system, irq,
softirq and steal (time a hypervisor gave to another guest is time the point could not have); idle and iowait
are not. Readings cost well under a millisecond: the own processes are found outside the windows, and only
their counters are read at an edge.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlbench.machine.telemetry import CONTENTION_SHARE, Contention, ThreadChoice

PROC_STAT = Path("/proc/stat")
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system [idle iowait] irq softirq steal; guest is inside user
_TOTAL_FIELDS = 8  # user .. steal


@dataclass(frozen=True)
class CpuTicks:
    """Busy and total ticks of a set of CPUs, from /proc/stat."""

    busy: int
    total: int


def cpu_ticks(cpus: Iterable[int] | None = None, path: Path = PROC_STAT) -> CpuTicks:
    """The busy and total ticks of the given CPUs (every CPU when None), from /proc/stat's per-CPU lines."""
    return parse_ticks(path.read_text(), cpus)


def parse_ticks(text: str, cpus: Iterable[int] | None = None) -> CpuTicks:
    """The busy and total ticks of the given CPUs (every CPU when None) in /proc/stat's text."""
    wanted = None if cpus is None else {f"cpu{c}" for c in cpus}
    busy = total = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or (wanted is not None and name not in wanted):
            continue
        values = [int(v) for v in rest.split()[:_TOTAL_FIELDS]]
        values += [0] * (_TOTAL_FIELDS - len(values))
        busy += sum(values[i] for i in _BUSY_FIELDS)
        total += sum(values)
    return CpuTicks(busy, total)


def ticks_per_s() -> int:
    """The kernel's USER_HZ (the unit of /proc/stat and /proc/PID/stat)."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def process_cpu_s(procs: Iterable[psutil.Process]) -> dict[int, float]:
    """User + system CPU seconds of each process still there (its children's are theirs, read separately)."""
    out: dict[int, float] = {}
    for p in procs:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        out[p.pid] = t.user + t.system
    return out


def tree(root: psutil.Process) -> list[psutil.Process]:
    """A process and all its descendants (what a point runs: the controller, its launcher, its ranks)."""
    try:
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return [root]


def affinity_cpus(procs: Iterable[psutil.Process]) -> set[int]:
    """The CPUs the processes may run on (union of their affinities; every CPU where it cannot be read)."""
    cpus: set[int] = set()
    for p in procs:
        try:
            cpus.update(p.cpu_affinity() or [])
        except (psutil.Error, AttributeError, OSError):
            continue
    return cpus or set(range(psutil.cpu_count() or 1))


@dataclass
class _Edge:
    ticks: CpuTicks
    own: dict[int, float]
    at: float
    wall: float


class CpuWindows:
    """Others' share of the point's CPUs over its measured windows, from readings at each window's edges.

    `own` lists the point's processes; it is called by `refresh()` (outside the windows: at a warm-up step, at a
    window's end), never at a start edge, which only re-reads the counters of the processes already found. A
    process found at an end edge that started inside the window counts all its time as the point's.
    """

    def __init__(
        self,
        own: Callable[[], list[psutil.Process]],
        stat_path: Path = PROC_STAT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.own = own
        self.stat_path = stat_path
        self.clock = clock
        self.procs: list[psutil.Process] = []
        self.cpus: set[int] | None = None
        self.busy = self.total = 0
        self.own_s = 0.0
        self.window_s = 0.0
        self.windows = 0
        self.load_avg: tuple[float, float, float] | None = None
        self.error = ""
        self._start: _Edge | None = None

    def refresh(self) -> None:
        """Find the point's processes and CPUs again."""
        self.procs = self.own()
        self.cpus = affinity_cpus(self.procs)

    def _read(self) -> _Edge:
        if self.cpus is None:
            self.refresh()
        return _Edge(cpu_ticks(self.cpus, self.stat_path), process_cpu_s(self.procs), self.clock(), time.time())

    def _born_after(self, pid: int, wall: float) -> bool:
        try:
            return psutil.Process(pid).create_time() >= wall
        except psutil.Error:
            return False

    def edge(self, which: str) -> None:
        """A window's start or end; a failed reading leaves that window out, saying why."""
        try:
            if which == "start":
                self._start = self._read()
                return
            if self._start is None:
                return
            start, self._start = self._start, None
            self.refresh()
            end = self._read()
            self.busy += end.ticks.busy - start.ticks.busy
            self.total += end.ticks.total - start.ticks.total
            self.own_s += sum(t - start.own[pid] for pid, t in end.own.items() if pid in start.own)
            self.own_s += sum(
                t for pid, t in end.own.items() if pid not in start.own and self._born_after(pid, start.wall)
            )
            self.window_s += end.at - start.at
            self.windows += 1
            self.load_avg = os.getloadavg()
        except (OSError, ValueError) as exc:
            self.error = f"cannot read CPU counters: {exc}"[:200]

    def result(self) -> Contention:
        """Others' share over every measured window, or why there is none."""
        cpus = len(self.cpus or ())
        if not self.windows or self.total <= 0:
            return Contention(cpus=cpus, note=self.error or "no measured window was seen")
        hz = ticks_per_s()
        others = max(0.0, self.busy / hz - self.own_s)
        return Contention(
            others_share=min(1.0, others / (self.total / hz)),
            cpus=cpus,
            window_s=self.window_s,
            load_avg=self.load_avg,
            note=self.error,
        )


def others_share_now(
    own: Callable[[], list[psutil.Process]],
    interval_s: float = 1.0,
    stat_path: Path = PROC_STAT,
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Others' share of this process's CPUs over the next `interval_s`, as in the measured windows."""
    probe = CpuWindows(own, stat_path)
    probe.edge("start")
    sleep(interval_s)
    probe.edge("end")
    return probe.result().others_share


AUTO_PROBE_S = 0.25  # how long --threads auto watches the CPUs before a point (25 ticks per CPU at USER_HZ 100;
# a coarse reading is enough to count free cores, and every point pays it)


def auto_threads(share: float | None, cores: int, ranks: int = 1) -> ThreadChoice:
    """--threads auto: the physical cores others leave free (others' share of the CPUs just before the point,
    spread evenly over them), rounded half up and split between the node's ranks, at least 1 thread each. Rounded
    so, a count of 2 or more never has others above the contention threshold of the cores it needs."""
    cores, ranks = max(1, cores), max(1, ranks)
    if share is None:
        return ThreadChoice("auto", max(1, cores // ranks), ranks, cores, None, "others' share unknown: every core")
    free = cores * (1.0 - min(1.0, max(0.0, share)))
    total = min(cores, int(free + 0.5))
    used = max(1, total // ranks)
    held = f"others held {share:.0%} of the CPUs just before the point"
    if used * ranks >= cores:
        why = f"{held}: all {cores} physical core{'s' * (cores != 1)} free"
    elif total < ranks:
        why = f"{held}: less than a core free per rank, so 1 thread each"
    else:
        why = f"{held}: {total} of {cores} physical cores free"
    return ThreadChoice("auto", used, ranks, cores, share, why + (f", split over {ranks} ranks" if ranks > 1 else ""))


def own_cpu_s(times: os.times_result | None = None) -> float:
    """This process's CPU seconds (os.times, now where not given): its threads' and its ended children's."""
    t = times or os.times()
    return t.user + t.system + t.children_user + t.children_system


def others_share_since(
    since: float,
    times: os.times_result,
    stat: str,
    least_s: float,
    stat_path: Path = PROC_STAT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Others' share of this process's CPUs from `since` (when this process's CPU times were `times` and /proc/stat
    read `stat`) to now, first waiting until `least_s` have passed since then; None where it cannot be read. This
    process's own time, its threads' and its ended children's, is not others': call it while no child runs."""
    left = least_s - (clock() - since)
    if left > 0:
        sleep(left)
    try:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        before, after = parse_ticks(stat, cpus), cpu_ticks(cpus, stat_path)
    except (OSError, ValueError):
        return None
    hz = ticks_per_s()
    total = (after.total - before.total) / hz
    if not stat or total <= 0:
        return None
    others = max(0.0, (after.busy - before.busy) / hz - (own_cpu_s() - own_cpu_s(times)))
    return min(1.0, others / total)


def wait_quiet(
    limit_s: float,
    own: Callable[[], list[psutil.Process]],
    gpu_busy: Callable[[], bool] = lambda: False,
    interval_s: float = 1.0,
    stat_path: Path = PROC_STAT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, bool]:
    """--wait-quiet: wait up to limit_s for others' share of the CPUs to fall to the threshold and the point's
    GPUs to be free; (seconds waited, whether it became quiet). It runs anyway after the limit."""
    start = clock()
    while True:
        share = others_share_now(own, interval_s, stat_path, sleep)
        if (share is None or share <= CONTENTION_SHARE) and not gpu_busy():
            return clock() - start, True
        if clock() - start >= limit_s:
            return clock() - start, False


__all__ = [
    "AUTO_PROBE_S",
    "PROC_STAT",
    "CpuTicks",
    "CpuWindows",
    "affinity_cpus",
    "auto_threads",
    "cpu_ticks",
    "others_share_now",
    "others_share_since",
    "own_cpu_s",
    "parse_ticks",
    "process_cpu_s",
    "tree",
    "wait_quiet",
]
