"""Train to a target and keep the loss curve (`--converge`, issue #34): a value every K steps, read from the device
once per K steps (the trainer accumulates its loss on the device; `loss_window` reads and resets it), never a host
sync per step.

The run stops at the first reading at or below the target loss, or when the step budget is spent, or when a
reading is not finite (nothing can recover from NaN), or when the user stops it (the curve so far is kept, marked
interrupted). Framework-free: it drives any Trainer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

Clock = Callable[[], float]


class CurveTrainer(TypingProtocol):
    """The part of a Trainer a convergence run needs."""

    def next_batch(self) -> Any:
        """The next input batch."""

    def train_step(self, batch: Any) -> None:
        """One train step."""

    def sync(self) -> None:
        """Wait for the device."""

    def loss_window(self) -> float:
        """The mean loss of the steps since the last call, read from the device once."""

    def agree_steps(self, steps: int) -> int:
        """Rank 0's value, adopted by every rank (through the framework's own collective; as is on one rank)."""


@dataclass(frozen=True)
class Curve:
    """A loss curve: `losses[i]` is the mean loss of steps i*every+1 .. (i+1)*every, `wall_s[i]` the seconds since
    the first step when it was read; `steps` the steps taken (a last partial window is read too)."""

    every: int
    losses: tuple[float, ...] = ()
    wall_s: tuple[float, ...] = ()
    steps: int = 0
    interrupted: bool = False
    seed: int = 0

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (non-finite losses as strings, as JSON has no NaN)."""
        return {
            "every": self.every,
            "losses": [v if math.isfinite(v) else str(v) for v in self.losses],
            "wall_s": list(self.wall_s),
            "steps": self.steps,
            "interrupted": self.interrupted,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Curve:
        """The inverse of to_dict."""
        return cls(
            every=int(raw["every"]),
            losses=tuple(float(v) for v in raw.get("losses", ())),
            wall_s=tuple(float(v) for v in raw.get("wall_s", ())),
            steps=int(raw.get("steps", 0)),
            interrupted=bool(raw.get("interrupted", False)),
            seed=int(raw.get("seed", 0)),
        )

    def read_steps(self, index: int) -> int:
        """The step count at reading `index` (the last reading may close a partial window)."""
        return min((index + 1) * self.every, self.steps)


@dataclass
class _Reads:
    losses: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)


def train_curve(
    trainer: CurveTrainer,
    budget: int,
    every: int,
    target_loss: float,
    clock: Clock = time.perf_counter,
    seed: int = 0,
) -> Curve:
    """Train until the mean loss of a window of `every` steps is at or below `target_loss`, or `budget` steps are
    taken, or a reading is not finite; Ctrl-C keeps the curve so far (interrupted). One device read per window."""
    if budget < 1 or every < 1:
        raise ValueError(f"a convergence run needs a step budget and an interval >= 1; got {budget}, {every}")
    reads, steps, interrupted = _Reads(), 0, False
    trainer.sync()
    start = clock()
    try:
        while steps < budget:
            size = min(every, budget - steps)
            for _ in range(size):
                trainer.train_step(trainer.next_batch())
            steps += size
            loss = trainer.loss_window()  # the one host read of this window (it waits for the device)
            reads.losses.append(loss)
            reads.wall_s.append(clock() - start)
            stop = not math.isfinite(loss) or loss <= target_loss
            if trainer.agree_steps(int(stop)):  # rank 0 decides: every rank stops at the same step
                break
    except KeyboardInterrupt:
        interrupted = True
    return Curve(every, tuple(reads.losses), tuple(reads.wall_s), steps, interrupted, seed)
