"""A rich progress display: one bar for the points, one for the steps of the point in flight, each with an ETA
from the measured steps' pace (known after the first one) and an elapsed time that is never cut."""

from __future__ import annotations

import datetime
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column
from rich.text import Text

from dlbench.launch.process import ProgressSink
from dlbench.records import PointResult
from dlbench.spec import PointSpec


def describe(spec: PointSpec) -> str:
    """A short label for a point."""
    extras = "".join([" compile" if spec.compile else "", f" {spec.scale}" if spec.world_size > 1 else ""])
    return f"{spec.framework} {spec.model} bs{spec.batch_size} {spec.precision}{extras}"


class EtaColumn(ProgressColumn):
    """'eta 0:03:12' from the task's `eta_s` field (the measured pace), 'eta after 1st step' before it is known."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True, min_width=12))

    def render(self, task: Task) -> Text:
        """The ETA cell."""
        eta = task.fields.get("eta_s")
        if task.finished:
            return Text("done", style="progress.remaining")
        if eta is None:
            return Text("eta after 1st step", style="progress.remaining")
        return Text(f"eta {datetime.timedelta(seconds=round(max(0.0, eta)))}", style="progress.remaining")


class Pace:
    """The pace of one point's measured steps: seconds per step from the first measured event on."""

    def __init__(self) -> None:
        self.first: tuple[float, int] | None = None
        self.step_s: float | None = None

    def see(self, phase: str, done: int, now: float) -> None:
        """Note a progress event (`done` steps of the point so far, warm-up included)."""
        if phase == "warmup":
            return
        if self.first is None:
            self.first = (now, done)
        elif done > self.first[1]:
            self.step_s = (now - self.first[0]) / (done - self.first[1])


class RunProgress:
    """Context manager showing points done, failures, and the current point's steps, with an ETA."""

    def __init__(self, total: int, console: Console) -> None:
        # The description gives way first (it is cut with '…'); the counts, elapsed time and ETA never are.
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn(
                "{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=8)
            ),
            BarColumn(bar_width=16),
            MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
            EtaColumn(),
            console=console,
            transient=False,
            expand=True,
        )
        self.points = self.progress.add_task("points", total=total)
        self.steps = self.progress.add_task("", total=1, visible=False)
        self.failures = 0
        self.point_s: list[float] = []  # wall time of each finished point
        self.started_at = time.monotonic()

    def __enter__(self) -> RunProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def started(self, index: int, spec: PointSpec) -> ProgressSink:
        """Reset the step bar for a new point; returns the sink for the worker's progress events."""
        proto = spec.protocol
        per_repeat = proto.warmup + proto.steps
        total = per_repeat * proto.repeats
        self.progress.update(
            self.steps, description=describe(spec) + " (starting)", completed=0, total=total, visible=True, eta_s=None
        )
        self.started_at = time.monotonic()
        pace = Pace()

        def sink(event: dict[str, object]) -> None:
            r, s = int(event["repeat"]), int(event["step"])  # type: ignore[call-overload]
            done = r * per_repeat + (s if event["phase"] == "warmup" else proto.warmup + s)
            pace.see(str(event["phase"]), done, time.monotonic())
            left = None if pace.step_s is None else pace.step_s * (total - done)
            self.progress.update(
                self.steps,
                completed=done,
                eta_s=left,
                description=f"{describe(spec)} ({event['phase']}, repeat {r + 1})",
            )
            self._points_eta(left)

        return sink

    def restart(self, total: int) -> None:
        """Count the points from zero, out of `total` (a sweep knows how many it runs once its searches ended)."""
        self.progress.update(self.points, total=total, completed=0, description="points")

    def note(self, text: str) -> None:
        """Show what happens before the points (e.g. a max-batch search) on the points bar."""
        self.progress.update(self.points, description=text)

    def _points_eta(self, this_left: float | None) -> None:
        """The run's ETA: this point's rest, then the points after it at the pace of those done (or of this one)."""
        task = self.progress.tasks[self.points]
        after = max(0.0, (task.total or 0) - task.completed - 1)
        if this_left is None:
            return
        per_point = (
            sum(self.point_s) / len(self.point_s) if self.point_s else time.monotonic() - self.started_at + this_left
        )
        self.progress.update(self.points, eta_s=this_left + after * per_point)

    def done(self, index: int, result: PointResult) -> None:
        """Advance the points bar, counting failures."""
        self.point_s.append(time.monotonic() - self.started_at)
        if result.status != "ok":
            self.failures += 1
        label = "points" + (f" ({self.failures} failed)" if self.failures else "")
        self.progress.update(self.points, advance=1, description=label)
        task = self.progress.tasks[self.points]
        self.progress.update(
            self.points, eta_s=max(0.0, (task.total or 0) - task.completed) * sum(self.point_s) / len(self.point_s)
        )
