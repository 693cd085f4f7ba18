"""Run one point where its spec says, and turn what the child(ren) left into a PointResult."""

from __future__ import annotations

import sys
import time

from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.results.record import point_result
from dlbench.results.schema import PointResult
from dlbench.spec import PointSpec, SpecError


def execute(spec: PointSpec, launchers: Launchers, python: str = sys.executable,
            on_progress: ProgressSink | None = None) -> PointResult:
    """Run a point with its launcher and return its result; never raises for a failed point."""
    started = time.time()
    try:
        launcher = launchers.get(spec.launcher)
    except SpecError as exc:
        return point_result(spec, "error", None, str(exc), [], started)
    outcome = launcher(spec, python, on_progress)
    return point_result(spec, outcome.status, outcome.result, outcome.error, outcome.tail, started)
