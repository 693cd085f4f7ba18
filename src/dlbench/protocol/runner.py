"""Run warm-up and measured steps on a Trainer, reading the clock only after the device has finished."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol as TypingProtocol

from dlbench.results.schema import RepeatRaw
from dlbench.spec import Protocol


class Steppable(TypingProtocol):
    """The part of a Trainer the protocol needs."""

    def step(self) -> None:
        """One train step."""

    def sync(self) -> None:
        """Wait for the device."""


Clock = Callable[[], float]
Progress = Callable[[str, int, int, int], None]  # (phase, repeat, step, total steps in phase)


def _quiet(phase: str, repeat: int, step: int, total: int) -> None:
    return None


def measure(trainer: Steppable, protocol: Protocol, clock: Clock = time.perf_counter,
            progress: Progress = _quiet) -> tuple[RepeatRaw, ...]:
    """Warm up, then time each measured step; repeat. Warm-up steps are never timed.

    Clock reads are contiguous: step i ends where step i+1 starts, so the wall time of a repeat is the
    last read minus the first, and equals the sum of its step times.
    """
    repeats = []
    for r in range(protocol.repeats):
        for w in range(protocol.warmup):
            trainer.step()
            trainer.sync()
            progress("warmup", r, w + 1, protocol.warmup)
        trainer.sync()
        reads = [clock()]
        for s in range(protocol.steps):
            trainer.step()
            trainer.sync()
            reads.append(clock())
            progress("measure", r, s + 1, protocol.steps)
        steps = tuple(b - a for a, b in zip(reads, reads[1:]))
        repeats.append(RepeatRaw(step_times=steps, wall_s=reads[-1] - reads[0]))
    return tuple(repeats)
