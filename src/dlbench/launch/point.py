"""Run one point where its spec says, and turn what the child(ren) left into a PointResult."""

from __future__ import annotations

import dataclasses
import sys
import time

from dlbench.analysis.record import point_result
from dlbench.launch.outcome import PointInterrupted
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.launch.watch import PointWatch
from dlbench.machine.telemetry import with_telemetry
from dlbench.records import PointResult
from dlbench.spec import PointSpec, SpecError


def execute(
    spec: PointSpec,
    launchers: Launchers,
    python: str = sys.executable,
    on_progress: ProgressSink | None = None,
    wait_quiet_s: float = 0.0,
    price_per_hour: float | None = None,
) -> PointResult:
    """Run a point with its launcher and return its result, with the machine's state around it (contention,
    energy, GPU clocks and memory: launch/watch.py); never raises for a failed point. ``wait_quiet_s``: wait up
    to that long for a quiet machine first; ``price_per_hour``: one device's hourly price, kept for its cost. A CPU
    point without --threads whose ranks run here gets the cores others leave free (launch/watch.py); its identity
    records the count used, its spec keeps "auto" (threads None)."""
    started = time.time()
    try:
        launcher = launchers.get(spec.launcher)
    except SpecError as exc:
        return point_result(spec, "error", None, str(exc), [], started)
    stopped: PointInterrupted | None = None
    with PointWatch(spec, wait_quiet_s, price_per_hour, place_threads=launcher.runs_here(spec)) as watch:
        run_spec = watch.run_spec  # --threads auto: the count chosen just now (the stored spec keeps "auto")
        try:
            outcome = launcher.launch(run_spec, python, watch.sink(on_progress))
        except PointInterrupted as stop:  # Ctrl-C, and the worker left its result (a convergence curve so far)
            outcome, stopped = stop.outcome, stop
    telemetry, worker = watch.finish(outcome.result)
    measured = point_result(run_spec, outcome.status, worker, outcome.error, outcome.tail, started)
    result = with_telemetry(dataclasses.replace(measured, spec=spec), telemetry)
    if stopped is not None:
        raise PointInterrupted(outcome, result) from None  # the caller keeps it, then stops
    return result
