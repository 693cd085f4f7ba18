"""A bare loop for dlbench's fake backend (a test double, no framework): each step sleeps what a fake step sleeps
by default (1 ms), so that the GPU validation's rehearsal runs fairness.py's wiring end to end on a CPU."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args

STEP_S = 0.001  # the fake backend's default step (dlbench.backends.fake: "sleep:0.001")


def main() -> None:
    """Sleep STEP_S a step, measured as the other loops are."""
    args = parse_args(__doc__)
    measure(lambda: time.sleep(STEP_S), lambda: None, args, "fake: sleeps 1 ms a step")


if __name__ == "__main__":
    main()
