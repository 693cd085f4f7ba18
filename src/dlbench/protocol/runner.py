"""Run warm-up and measured steps on a Trainer: measured steps are timed in windows synchronised with the device
only at each window's two ends, so that the host queues step i+1 while the device runs step i, as in the seeds.

One repeat: `warmup` untimed steps, a sync, then the measured steps split into `protocol.windows` windows of
near-equal size (a sync and a clock read after each). Clock reads are contiguous, so the repeat's wall time is
the last read minus the first and equals the sum of its windows. ``sync_every_step`` makes every step its own
window (today's latency view). The time spent in ``next_batch()`` during measured steps is counted as input wait.

A protocol with a minimum measured time raises the measured steps, once, before the first repeat: it times
one calibration window of `steps` steps (extra warm-up, never stored) and takes enough steps for a repeat to
last that long. Ranks must take the same number of steps (their collectives pair up step by step): `agree`
gives every rank rank 0's count (the trainer's `agree_steps`, through the framework's own collective); a point
whose trainer cannot agree runs several ranks uncalibrated (the worker says so in its facts).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any
from typing import Protocol as TypingProtocol

from dlbench.records import RepeatRaw
from dlbench.spec import Protocol

MAX_CALIBRATED_STEPS = 100_000


class StepTimer(TypingProtocol):
    """Per-step device time from the framework's device events (e.g. CUDA events), read after a sync."""

    kind: str

    def start(self) -> None:
        """Mark the start of a step on the device's queue."""

    def stop(self) -> None:
        """Mark its end."""

    def read(self) -> tuple[float, ...]:
        """Seconds of every step marked since the last read (call after the device finished), oldest first."""


class Steppable(TypingProtocol):
    """The part of a Trainer the protocol needs."""

    def next_batch(self) -> Any:
        """The next input batch."""

    def train_step(self, batch: Any) -> None:
        """One train step."""

    def sync(self) -> None:
        """Wait for the device."""

    def step_timer(self) -> StepTimer | None:
        """Device events per step, or None."""


Clock = Callable[[], float]
Progress = Callable[[str, int, int, int], None]  # (phase, repeat, step, total steps in phase)
Edge = Callable[[str, int, int], None]  # ("start" | "end", repeat, measured steps): outside the timed region


def _quiet(phase: str, repeat: int, step: int, total: int) -> None:
    return None


def _no_edge(edge: str, repeat: int, steps: int) -> None:
    return None


@dataclass(frozen=True)
class Measured:
    """What one rank measured: its repeats, the input wait in measured steps, and the steps per repeat."""

    repeats: tuple[RepeatRaw, ...]
    input_wait_s: float
    steps: int
    steps_asked: int
    device_timer: str = ""

    @property
    def calibrated(self) -> bool:
        """Whether a minimum measured time raised the steps above the protocol's."""
        return self.steps != self.steps_asked


def window_sizes(steps: int, windows: int) -> tuple[int, ...]:
    """Split `steps` into min(windows, steps) windows whose sizes differ by at most one, larger ones first."""
    n = min(windows, steps)
    base, extra = divmod(steps, n)
    return tuple(base + (1 if i < extra else 0) for i in range(n))


def calibrated_steps(trainer: Steppable, protocol: Protocol, clock: Clock) -> int:
    """Measured steps per repeat so that a repeat lasts at least protocol.min_time_s: times one window of
    protocol.steps steps (untimed for the record), never fewer than protocol.steps."""
    start = clock()
    for _ in range(protocol.steps):
        trainer.train_step(trainer.next_batch())
    trainer.sync()
    per_step = (clock() - start) / protocol.steps
    if per_step <= 0:
        return protocol.steps
    return int(min(MAX_CALIBRATED_STEPS, max(protocol.steps, math.ceil(protocol.min_time_s / per_step))))


def _own(steps: int) -> int:
    return steps


def measure(
    trainer: Steppable,
    protocol: Protocol,
    clock: Clock = time.perf_counter,
    progress: Progress = _quiet,
    sync_every_step: bool = False,
    calibrate: bool = True,
    window_edge: Edge = _no_edge,
    agree: Callable[[int], int] = _own,
) -> Measured:
    """Warm up, then time the measured steps in windows; repeat. Warm-up steps are never timed. `window_edge` is
    called just before each repeat's first clock read and just after its last, never between them. A calibrated
    step count goes through `agree` (several ranks: rank 0's count for every rank)."""
    timer = trainer.step_timer()
    steps, waited = protocol.steps, 0.0
    repeats = []
    for r in range(protocol.repeats):
        for w in range(protocol.warmup):
            trainer.train_step(trainer.next_batch())
            progress("warmup", r, w + 1, protocol.warmup)
        trainer.sync()
        if r == 0 and calibrate and protocol.min_time_s > 0:
            steps = agree(calibrated_steps(trainer, protocol, clock))
        if timer is not None:
            timer.read()  # forget warm-up and calibration steps
        sizes = (1,) * steps if sync_every_step else window_sizes(steps, protocol.windows)
        window_edge("start", r, steps)
        reads, done = [clock()], 0
        for size in sizes:
            for _ in range(size):
                before = clock()
                batch = trainer.next_batch()
                waited += clock() - before
                if timer is not None:
                    timer.start()
                trainer.train_step(batch)
                if timer is not None:
                    timer.stop()
                done += 1
                progress("measure", r, done, steps)
            trainer.sync()
            reads.append(clock())
        window_edge("end", r, steps)
        spans = tuple(b - a for a, b in pairwise(reads))
        device = timer.read() if timer is not None else ()
        if sync_every_step:
            repeats.append(RepeatRaw(step_times=spans, wall_s=reads[-1] - reads[0], device_step_s=device))
        else:
            repeats.append(
                RepeatRaw(
                    step_times=(), wall_s=reads[-1] - reads[0], window_s=spans, window_steps=sizes, device_step_s=device
                )
            )
    return Measured(tuple(repeats), waited, steps, protocol.steps, timer.kind if timer is not None else "")
