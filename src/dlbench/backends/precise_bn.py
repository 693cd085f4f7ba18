"""Batch normalisation's population statistics for the independent evaluation (#44, dlbench/evaluate.py says
why), the framework-agnostic part: each calibration batch's own statistics read after a forward that leaves them
in the layers (momentum 0), averaged, and written back. A backend's evaluator supplies the three framework calls."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


def average_batch_statistics(
    batches: Iterable[dict[str, np.ndarray]],
    forward: Callable[[dict[str, np.ndarray]], Any],
    read: Callable[[], list[np.ndarray]],
    write: Callable[[list[np.ndarray]], None],
) -> int:
    """Run `forward` (training-mode batch norm, momentum 0) on each batch, average what `read` returns after
    each, `write` the averages; the number of batches averaged (0: nothing written)."""
    total: list[np.ndarray] | None = None
    count = 0
    for batch in batches:
        forward(batch)
        stats = [np.asarray(s, np.float64) for s in read()]
        total = stats if total is None else [t + s for t, s in zip(total, stats, strict=True)]
        count += 1
    if total is not None:
        write([(t / count).astype(np.float32) for t in total])
    return count
