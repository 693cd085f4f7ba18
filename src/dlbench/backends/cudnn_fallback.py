"""cuDNN's "no valid algorithm" failure near the memory limit: retried once without autotuning, then read as OOM.

Near the memory limit (the batch a max-batch probe reaches), cuDNN reports that it ran out of workspace in its own
words: "Unable to find a valid cuDNN algorithm to run convolution", `CUDNN_STATUS_NOT_SUPPORTED`, "unable to find
an engine". With autotuning on (torch's `cudnn.benchmark`), the tuner tries algorithms whose workspace does not
fit; the point is retried once with autotuning off (the heuristics' choice, which needs less). If it fails again
so, with the device's memory nearly full, it is stored as `oom` (a search then stops there, as it should), else
as the error it is. Framework-free: a backend says how to turn autotuning off and how full its device is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

NO_ALGORITHM = re.compile(
    r"Unable to find a valid cuDNN algorithm|CUDNN_STATUS_NOT_SUPPORTED|"
    r"unable to find an engine|no valid (cuDNN )?(algorithm|engine)",
    re.IGNORECASE,
)
# The used share of the device's memory from which a second "no valid algorithm" failure reads as out of memory.
NEARLY_FULL = 0.9
RETRIED = "cudnn_retry"


def no_algorithm(text: str) -> bool:
    """Whether an error message is cuDNN's "no valid algorithm / engine" failure."""
    return NO_ALGORITHM.search(text or "") is not None


def exhausted(text: str, used_share: float | None) -> bool:
    """Whether a failure after the retry reads as out of memory: cuDNN found no algorithm again, with the device's
    memory at least NEARLY_FULL used (None: unknown, so not)."""
    return no_algorithm(text) and used_share is not None and used_share >= NEARLY_FULL


def should_retry(status: str, error: str, autotune_off: Callable[[], bool]) -> bool:
    """Whether a point that ended with `status` and `error` is run once more: an `error` that is cuDNN's "no valid
    algorithm", where the backend could turn autotuning off (autotune_off() says so, having done it)."""
    return status == "error" and no_algorithm(error) and autotune_off()


def retry_fact(first_error: str) -> str:
    """What the point records when it was retried."""
    return f"retried once with cuDNN autotuning off after: {first_error.splitlines()[0][:200]}"


__all__ = ["NEARLY_FULL", "NO_ALGORITHM", "RETRIED", "exhausted", "no_algorithm", "retry_fact", "should_retry"]
