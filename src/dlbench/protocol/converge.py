"""Train to a target and keep the loss curve (`--converge`, issue #34): a value every K steps, read from the device
once per K steps (the trainer accumulates its loss on the device; `loss_window` reads and resets it), never a host
sync per step.

The run stops at the first reading at or below the target loss, or when the step budget is spent, or when a
reading is not finite (nothing can recover from NaN), or when the user stops it (the curve so far is kept, marked
interrupted). A case judged by AUC (DLRM, as MLPerf judges it) also scores a held-out set at each reading
(`evaluate`) and stops at the first AUC at or above its target instead. Framework-free: it drives any Trainer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

Clock = Callable[[], float]
CurveProgress = Callable[[int, float, float | None], None]  # (steps taken, the window's loss, its AUC) per reading


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
    auc: tuple[float, ...] = ()  # the held-out AUC at each reading, where the run is judged by AUC
    target_auc: float | None = None

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (non-finite losses as strings, as JSON has no NaN)."""
        out: dict[str, object] = {
            "every": self.every,
            "losses": [v if math.isfinite(v) else str(v) for v in self.losses],
            "wall_s": list(self.wall_s),
            "steps": self.steps,
            "interrupted": self.interrupted,
            "seed": self.seed,
        }
        if self.target_auc is not None:
            out.update(auc=[v if math.isfinite(v) else str(v) for v in self.auc], target_auc=self.target_auc)
        return out

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
            auc=tuple(float(v) for v in raw.get("auc", ())),
            target_auc=float(raw["target_auc"]) if raw.get("target_auc") is not None else None,
        )

    def read_steps(self, index: int) -> int:
        """The step count at reading `index` (the last reading may close a partial window)."""
        return min((index + 1) * self.every, self.steps)


@dataclass
class _Reads:
    losses: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    auc: list[float] = field(default_factory=list)


def train_curve(
    trainer: CurveTrainer,
    budget: int,
    every: int,
    target_loss: float,
    clock: Clock = time.perf_counter,
    seed: int = 0,
    evaluate: Callable[[], float] | None = None,
    target_auc: float | None = None,
    progress: CurveProgress | None = None,
) -> Curve:
    """Train until the mean loss of a window of `every` steps is at or below `target_loss` (with `evaluate` and
    `target_auc`: until the held-out AUC it returns is at or above `target_auc`), or `budget` steps are taken, or
    a reading is not finite; Ctrl-C keeps the curve so far (interrupted). One device read per window; `progress`
    hears each reading (the steps so far, the loss read, and the AUC where one is judged)."""
    if budget < 1 or every < 1:
        raise ValueError(f"a convergence run needs a step budget and an interval >= 1; got {budget}, {every}")
    scorer = evaluate if target_auc is not None else None
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
            auc = scorer() if scorer is not None else None  # MLPerf counts its evaluations in the time to train,
            reads.losses.append(loss)  # and so does this curve's wall time
            reads.wall_s.append(clock() - start)
            if auc is not None:
                reads.auc.append(auc)
            if progress is not None:
                progress(steps, loss, auc)
            stop = not math.isfinite(loss) or (loss <= target_loss if auc is None else auc >= (target_auc or 0.0))
            if trainer.agree_steps(int(stop)):  # rank 0 decides: every rank stops at the same step
                break
    except KeyboardInterrupt:
        interrupted = True
    return Curve(
        every,
        tuple(reads.losses),
        tuple(reads.wall_s),
        steps,
        interrupted,
        seed,
        tuple(reads.auc),
        target_auc if scorer is not None else None,
    )
