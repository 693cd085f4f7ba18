"""A rich progress display: one bar for the points, one for the steps of the point in flight."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from dlbench.launch.process import ProgressSink
from dlbench.records import PointResult
from dlbench.spec import PointSpec


def describe(spec: PointSpec) -> str:
    """A short label for a point."""
    extras = "".join([" compile" if spec.compile else "", f" {spec.scale}" if spec.world_size > 1 else ""])
    return f"{spec.framework} {spec.model} bs{spec.batch_size} {spec.precision}{extras}"


class RunProgress:
    """Context manager showing points done, failures, and the current point's steps, with an ETA."""

    def __init__(self, total: int, console: Console) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.points = self.progress.add_task("points", total=total)
        self.steps = self.progress.add_task("", total=1, visible=False)
        self.failures = 0

    def __enter__(self) -> RunProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def started(self, index: int, spec: PointSpec) -> ProgressSink:
        """Reset the step bar for a new point; returns the sink for the worker's progress events."""
        proto = spec.protocol
        per_repeat = proto.warmup + proto.steps
        self.progress.update(self.steps, description=describe(spec) + " (starting)", completed=0,
                             total=per_repeat * proto.repeats, visible=True)

        def sink(event: dict[str, object]) -> None:
            r, s = int(event["repeat"]), int(event["step"])  # type: ignore[call-overload]
            done = r * per_repeat + (s if event["phase"] == "warmup" else proto.warmup + s)
            self.progress.update(self.steps, completed=done,
                                 description=f"{describe(spec)} ({event['phase']}, repeat {r + 1})")

        return sink

    def restart(self, total: int) -> None:
        """Count the points from zero, out of `total` (a sweep knows how many it runs once its searches ended)."""
        self.progress.update(self.points, total=total, completed=0, description="points")

    def note(self, text: str) -> None:
        """Show what happens before the points (e.g. a max-batch search) on the points bar."""
        self.progress.update(self.points, description=text)

    def done(self, index: int, result: PointResult) -> None:
        """Advance the points bar, counting failures."""
        if result.status != "ok":
            self.failures += 1
        label = "points" + (f" ({self.failures} failed)" if self.failures else "")
        self.progress.update(self.points, advance=1, description=label)
