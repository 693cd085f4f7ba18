"""`dlbench run --converge` through the run API with the fake backend's loss-curve knob: reference runs measured
once and stored marked, reused, and each point's verdict kept in its extra (and its JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlbench.analysis.convergence import REFERENCE_KEY, VERDICT_KEY, convergence_lines, verdict_of
from dlbench.report.export import to_json
from dlbench.runapi.run import RunOutcome, RunRequest, execute_run, prepare_run


def _first_window(factor: float, target: float, every: int = 10) -> int:
    """The step count at the first window of `every` steps whose mean of factor**k is at or below the target."""
    end = every
    while sum(factor**k for k in range(end - every + 1, end + 1)) / every > target:
        end += every
    return end


def _run(store_path: Path, converge_steps: int | None = None) -> RunOutcome:
    req = RunRequest(
        framework="fake",
        model="resnet50",
        device="cpu",
        warmup=0,
        steps=1,
        repeats=1,
        batch_size="2",
        converge=True,
        converge_steps=converge_steps,
        store_path=str(store_path),
    )
    return execute_run(prepare_run(req))


def test_references_are_measured_once_then_reused_and_verdicts_stored(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99")
    first = _run(store_path)
    refs = [r for r in first.results if r.extra.get(REFERENCE_KEY)]
    assert [r.spec.seed for r in refs] == [0, 1, 2] and len(first.results) == 4
    candidate = first.results[-1]
    verdict = candidate.extra[VERDICT_KEY]
    assert isinstance(verdict, dict)
    assert verdict["verdict"] == "converged" and verdict["steps_to_target"] == _first_window(0.99, 0.25)
    assert verdict["reference"] is not None and "3 run(s)" in str(verdict["reference_line"])
    assert verdict["seed"] == 0 and verdict["target"] == 0.25
    lines = convergence_lines(list(first.results))
    assert any(f"converged, {_first_window(0.99, 0.25)} steps" in line for line in lines)
    exported = json.loads(to_json(first.mine(), list(first.stored)))
    assert "convergence" in json.dumps(exported)

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99:nan_at:50")  # the same point, now broken
    second = _run(store_path)
    assert len(second.results) == 1  # the stored references are reused
    assert verdict_of(second.results[0]) == "diverged"

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.999")  # a learning rate far too small
    third = _run(store_path, converge_steps=100)
    assert verdict_of(third.results[0]) == "not reached"
