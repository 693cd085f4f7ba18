"""A convergence curve's loss window (backends/base.LossWindow, #44): the sum of the steps' losses read once, its
mean, then a fresh window; a window with no step falls back to the trainer's last loss. Plain numbers stand in
for device tensors (the window only adds them and hands the sum to the trainer's read)."""

from __future__ import annotations

from dlbench.backends.base import LossWindow


def test_the_window_reads_its_sum_once_and_starts_again() -> None:
    window, reads = LossWindow(), []

    def read(total: float) -> float:
        reads.append(total)
        return total

    for loss in (3.0, 1.0, 2.0):
        window.add(loss)
    assert window.mean(read, lambda: -1.0) == 2.0 and reads == [6.0]
    assert window.mean(read, lambda: -1.0) == -1.0 and reads == [6.0]  # empty: the last loss, no read
    window.add(5.0)
    assert window.mean(read, lambda: -1.0) == 5.0 and reads == [6.0, 5.0]
