"""Run a list of points into one stored run: each point in its own worker, each committed as it ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.lock import attach_request
from dlbench.launch.outcome import PointInterrupted
from dlbench.launch.point import execute
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.store.store import Store

PointStarted = Callable[[int, PointSpec], ProgressSink | None]
PointDone = Callable[[int, PointResult], None]


def run_points(
    store: Store,
    run_id: str,
    specs: Sequence[PointSpec],
    launchers: Launchers,
    started: PointStarted | None = None,
    done: PointDone | None = None,
    extras: Mapping[str, Mapping[str, object]] | None = None,
    wait_quiet_s: float = 0.0,
    price_per_hour: float | None = None,
    finish: Callable[[PointResult], PointResult] | None = None,
) -> list[PointResult]:
    """Run every spec in order; a failed point is recorded and the run goes on. Ctrl-C propagates. ``extras``:
    facts to keep with a point, by its spec key (the search that found its value); ``wait_quiet_s`` and
    ``price_per_hour`` go to each point (launch.point.execute); ``finish`` rewrites each result before it is stored.
    A point stopped by Ctrl-C whose worker still wrote its result (a convergence run's curve so far) is stored
    like any other before the Ctrl-C propagates."""
    results = []

    def keep(i: int, spec: PointSpec, result: PointResult, python: str) -> PointResult:
        result = attach_request(store, run_id, result, python)  # the command and package lock that made it
        if extras and spec.key() in extras:
            result = dataclasses.replace(result, extra={**result.extra, **extras[spec.key()]})
        if finish is not None:  # what the caller adds before the point is kept (a convergence verdict)
            result = finish(result)
        store.add_point(run_id, result)
        if done:
            done(i, result)
        return result

    for i, spec in enumerate(specs):
        sink = started(i, spec) if started else None
        python = interpreter_for(spec.framework, spec.release)
        try:
            result = execute(
                spec,
                launchers,
                python=python,
                on_progress=sink,
                wait_quiet_s=wait_quiet_s,
                price_per_hour=price_per_hour,
            )
        except PointInterrupted as stop:  # Ctrl-C; the worker left its result (a convergence curve so far): kept
            if stop.result is not None:
                keep(i, spec, stop.result, python)
            raise
        results.append(keep(i, spec, result, python))
    return results
