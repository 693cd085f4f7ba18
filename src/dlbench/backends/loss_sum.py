"""A convergence window's loss kept on the device (#44): a trainer adds each step's loss tensor (a device add, no
host read) while a curve is read, and `Trainer.loss_window` reads the sum once per window (protocol/converge.py).
Framework-free: the framework's host read of a scalar is passed in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class LossSum:
    """The sum of the losses since the last read, as a framework tensor, and how many steps it holds."""

    def __init__(self) -> None:
        self.total: Any = None
        self.steps = 0

    def add(self, loss: Any) -> None:
        """Add one step's loss tensor (an add on its device, nothing read to the host)."""
        self.total = loss if self.total is None else self.total + loss
        self.steps += 1

    def mean(self, read: Callable[[Any], float]) -> float | None:
        """The mean loss of the window (`read`: the framework's one host read of the sum), None where no step was
        added; the sum starts again."""
        if self.total is None:
            return None
        mean = read(self.total) / self.steps
        self.total, self.steps = None, 0
        return mean
