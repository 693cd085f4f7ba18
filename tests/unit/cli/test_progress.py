"""Issue 42 items 5 and 6: the progress bars never say `done` before the point ended and never show an ETA before
a measured pace (`eta 0:00:00` at 0/1; `eta after 1st step` after 2 steps, before); `--converge` says before it
starts what it trains (reference runs first, how many, why), then its steps, the loss read against the target and
a time bound from its measured pace."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from dlbench.analysis.references import missing_references
from dlbench.cli import progress as progress_module
from dlbench.cli.progress import FINISHING, NO_PACE, RunProgress, eta_text
from dlbench.runapi.converge import plan_lines
from dlbench.spec import PointSpec, Protocol

SPEC = PointSpec(framework="fake", model="resnet50", batch_size=2, protocol=Protocol(2, 4, 1, "median"))


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", c)
    return c


def _eta(ui: RunProgress, task: int) -> str:
    t = ui.progress.tasks[task]
    return eta_text(t.fields.get("eta_s"), bool(t.fields.get("ended")), str(t.fields.get("eta_mark", "")))


def _event(phase: str, step: int, total: int, **more: object) -> dict[str, object]:
    return {"phase": phase, "repeat": 0, "step": step, "total": total, **more}


def test_eta_text_says_done_only_once_ended_and_no_eta_without_a_pace() -> None:
    assert eta_text(None) == NO_PACE and eta_text(0.0) == FINISHING and eta_text(0.0, ended=True) == "done"
    assert eta_text(192.0, mark="~") == "eta ~0:03:12" and eta_text(float("nan")) == NO_PACE


def test_no_eta_from_warm_up_steps_and_no_done_before_the_point_ended(clock: Clock) -> None:
    with RunProgress(1, Console(file=io.StringIO())) as ui:
        sink = ui.started(0, SPEC)
        for w in (1, 2):  # warm-up steps (compilation, caches): no pace
            clock.now += 5
            sink(_event("warmup", w, 2))
        assert _eta(ui, ui.steps) == NO_PACE and _eta(ui, ui.points) == NO_PACE
        clock.now += 1
        sink(_event("measure", 1, 4))
        assert _eta(ui, ui.steps) == NO_PACE  # one timed step is no pace yet
        clock.now += 1
        sink(_event("measure", 2, 4))
        assert _eta(ui, ui.steps) == "eta 0:00:02" and _eta(ui, ui.points) == "eta 0:00:02"
        clock.now += 2
        sink(_event("measure", 4, 4))  # every step taken: the worker still syncs and writes its result
        assert ui.progress.tasks[ui.steps].completed == 6
        assert _eta(ui, ui.steps) == FINISHING and _eta(ui, ui.points) == FINISHING  # never eta 0:00:00 at 0/1
        from tests.support.reports import make_point

        ui.done(0, make_point("fake"))
        assert _eta(ui, ui.steps) == "done" and _eta(ui, ui.points) == "done"


def test_a_calibrated_step_count_moves_the_total_instead_of_overrunning_it(clock: Clock) -> None:
    with RunProgress(2, Console(file=io.StringIO())) as ui:
        sink = ui.started(0, SPEC)
        sink(_event("measure", 1, 40))  # the runner calibrated 40 measured steps, not the protocol's 4
        assert ui.progress.tasks[ui.steps].total == 42 and not ui.progress.tasks[ui.steps].finished


def test_a_convergence_run_shows_its_steps_loss_target_and_a_bound(clock: Clock) -> None:
    spec = dataclasses.replace(SPEC, converge=True)
    out = io.StringIO()
    with RunProgress(2, Console(file=out, width=120, force_terminal=True)) as ui:
        sink = ui.started(0, spec)
        assert "converge first" in ui.progress.tasks[ui.steps].description
        sink(_event("converge", 10, 1000, loss=0.973, target=0.25))
        clock.now += 2
        sink(_event("converge", 30, 1000, loss=0.88, target=0.25))
        task = ui.progress.tasks[ui.steps]
        assert task.description == "fake resnet50 bs2 fp32 seed 0 (converge: loss 0.88 → 0.25)"
        assert task.completed == 30 and task.total == 1000
        # 0.1 s a step: at most 970 steps of the budget, then the 6 steps of the throughput
        assert _eta(ui, ui.steps) == "eta ≤0:01:38" and _eta(ui, ui.points).startswith("eta ~")
        sink(_event("converge", 40, 1000, loss="nan", target=0.25))
        assert "loss nan" in ui.progress.tasks[ui.steps].description
        sink(_event("converge", 50, 1000, loss=0.41, auc=0.712, target_auc=0.8))  # a DLRM: judged by its AUC
        assert ui.progress.tasks[ui.steps].description.endswith("(converge: AUC 0.712 → 0.8)")
        sink(_event("warmup", 1, 2))  # then the throughput is measured
        assert ui.progress.tasks[ui.steps].total == 6 and _eta(ui, ui.steps) == NO_PACE


def test_plan_lines_say_the_references_first_how_many_and_why() -> None:
    spec = dataclasses.replace(SPEC, converge=True)
    refs = missing_references([], [spec])
    lines = plan_lines(refs, [spec])
    assert len(refs) == 5  # no shipped point for the fake backend's resnet50 bs2: measured here
    assert lines[0].startswith("--converge: first 5 local reference run(s), fp32 on one device, seeds 100-104 (fake")
    assert "no shipped reference point matches" in lines[0] and "reused by later runs" in lines[0]
    assert lines[1].startswith("--converge: fake resnet50 bs2 fp32 trains to loss ") and "at most" in lines[1]
    assert plan_lines([], [SPEC]) == []
