"""A rich progress display: one bar for the points, one for the steps of the point in flight.

Its promises (#42): a bar says `done` only once its point (or the run) has ended, never when the worker's steps
reached their count while it still waits for the device or writes its result (`finishing` then); an ETA is shown
only from a measured pace (two timed steps of this point: warm-up steps and compilation are not a pace), `no eta
yet` before; the run's ETA is marked `~` where it counts points not started yet (at the pace of those done, or of
this one), and a convergence run's `≤` (it stops at its target loss, at the latest at its step budget). A
convergence run (`--converge`) shows its steps, the loss it read and its target.
"""

from __future__ import annotations

import datetime
import math
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

NO_PACE = "no eta yet"
FINISHING = "finishing"


def describe(spec: PointSpec) -> str:
    """A short label for a point."""
    extras = "".join([" compile" if spec.compile else "", f" {spec.scale}" if spec.world_size > 1 else ""])
    seed = f" seed {spec.seed}" if spec.converge else ""  # a reference run is one of several seeds
    return f"{spec.framework_label} {spec.model} bs{spec.batch_size} {spec.precision}{extras}{seed}"


def eta_text(eta_s: float | None, ended: bool = False, mark: str = "") -> str:
    """'done' once ended; 'no eta yet' before a measured pace; 'finishing' when the steps are all taken but the
    point has not ended; else 'eta 0:03:12' (with `~` or `≤` where it is an estimate or a bound)."""
    if ended:
        return "done"
    if eta_s is None or not math.isfinite(eta_s):
        return NO_PACE
    if eta_s < 0.5:
        return FINISHING
    return f"eta {mark}{datetime.timedelta(seconds=round(eta_s))}"


class EtaColumn(ProgressColumn):
    """The ETA cell of a task, from its fields `eta_s`, `eta_mark` and `ended` (eta_text)."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True, min_width=12))

    def render(self, task: Task) -> Text:
        """The ETA cell."""
        text = eta_text(task.fields.get("eta_s"), bool(task.fields.get("ended")), str(task.fields.get("eta_mark", "")))
        return Text(text, style="progress.remaining")


class Pace:
    """The pace of one phase of a point's steps: seconds per step from the first event of the phase on."""

    def __init__(self) -> None:
        self.first: tuple[float, int] | None = None
        self.step_s: float | None = None

    def see(self, done: int, now: float) -> None:
        """Note a progress event (`done` steps of the phase so far)."""
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
        self.label = "points"
        self.points = self.progress.add_task(self.label, total=total, eta_s=None, ended=False)
        self.steps = self.progress.add_task("", total=1, visible=False, eta_s=None, ended=False)
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
        per_repeat = [proto.warmup + proto.steps]  # the measured steps may be calibrated: the events say
        name = describe(spec)
        self.progress.update(
            self.steps,
            description=name + (" (starting: converge first)" if spec.converge else " (starting)"),
            completed=0,
            total=per_repeat[0] * proto.repeats,
            visible=True,
            eta_s=None,
            eta_mark="",
            ended=False,
        )
        self.started_at = time.monotonic()
        paces = {"converge": Pace(), "measure": Pace()}

        def sink(event: dict[str, object]) -> None:
            phase, r, s = str(event["phase"]), int(event["repeat"]), int(event["step"])  # type: ignore[call-overload]
            now = time.monotonic()
            if phase == "converge":
                self._converge(name, event, s, paces["converge"], now, proto.repeats * per_repeat[0])
                return
            if phase == "measure":
                per_repeat[0] = proto.warmup + int(event.get("total", proto.steps))  # type: ignore[call-overload]
            total = per_repeat[0] * proto.repeats
            done = r * per_repeat[0] + (s if phase == "warmup" else proto.warmup + s)
            left = None
            if phase == "measure":
                paces["measure"].see(done, now)
                step_s = paces["measure"].step_s
                left = None if step_s is None else step_s * (total - done)
            self.progress.update(
                self.steps,
                completed=min(done, total),
                total=total,
                eta_s=left,
                eta_mark="",
                description=f"{name} ({phase}, repeat {r + 1})",
            )
            self._points_eta(left)

        return sink

    def _converge(self, name: str, event: dict[str, object], step: int, pace: Pace, now: float, after: int) -> None:
        """A convergence run's reading: its steps of the budget, the loss against the target, an ETA bound from its
        pace (the budget's rest, then the throughput's `after` steps at the same pace)."""
        budget = int(event.get("total", step) or step)  # type: ignore[call-overload]
        judged = "auc" if "auc" in event else "loss"  # a DLRM is judged by its held-out AUC
        value, target = event.get(judged), event.get("target_auc" if judged == "auc" else "target")
        pace.see(step, now)
        left = None if pace.step_s is None else pace.step_s * (max(0, budget - step) + after)
        shown = f"{judged.upper() if judged == 'auc' else judged} " + (
            f"{float(value):.3g}" if isinstance(value, (int, float)) else str(value)  # NaN arrives as text
        )
        goal = f" → {float(target):.3g}" if isinstance(target, (int, float)) else ""
        self.progress.update(
            self.steps,
            completed=min(step, budget),
            total=budget,
            eta_s=left,
            eta_mark="≤",
            description=f"{name} (converge: {shown}{goal})",
        )
        self._points_eta(left, bound=True)

    def restart(self, total: int) -> None:
        """Count the points from zero, out of `total` (a sweep knows how many it runs once its searches ended)."""
        self.label = "points"
        self.progress.update(self.points, total=total, completed=0, description=self.label, ended=False)

    def note(self, text: str) -> None:
        """Name what the points bar counts now (e.g. 'reference runs', a max-batch search)."""
        self.label = text
        self.progress.update(self.points, description=text)

    def _points_eta(self, this_left: float | None, bound: bool = False) -> None:
        """The run's ETA: this point's rest, then the points after it at the pace of those done (or of this one);
        none before this point has a measured pace."""
        if this_left is None:
            return
        task = self.progress.tasks[self.points]
        after = max(0.0, (task.total or 0) - task.completed - 1)
        per_point = (
            sum(self.point_s) / len(self.point_s) if self.point_s else time.monotonic() - self.started_at + this_left
        )
        mark = "~" if after else "≤" if bound else ""
        self.progress.update(self.points, eta_s=this_left + after * per_point, eta_mark=mark)

    def done(self, index: int, result: PointResult) -> None:
        """The point ended: its step bar says so, the points bar advances (counting failures)."""
        self.point_s.append(time.monotonic() - self.started_at)
        if result.status != "ok":
            self.failures += 1
        self.progress.update(self.steps, ended=True, eta_s=None)
        label = self.label + (f" ({self.failures} failed)" if self.failures else "")
        self.progress.update(self.points, advance=1, description=label)
        task = self.progress.tasks[self.points]
        left = max(0.0, (task.total or 0) - task.completed)
        self.progress.update(
            self.points,
            eta_s=None if left else 0.0,
            eta_mark="",
            ended=not left,
        )
