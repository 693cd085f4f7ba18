"""Shipped reference convergence points (#44) and what is judged against them, without training: the file's schema
and its minimum of runs; a local reference measured with a defect in its environment reported as suspect against
the shipped point; a budget raised until a run can read `slower`; N runs olympic-scored and t-tested, so that a
step that drops every 4th optimizer update (1.33x the steps) reads `slower` over 5 runs though one run of it
does not."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dlbench.analysis.convergence import VERDICT_KEY, Reference
from dlbench.analysis.convergence_runs import group_verdict
from dlbench.analysis.olympic import acceptance
from dlbench.analysis.references import (
    budget_floor,
    budget_note,
    from_shipped,
    key_of,
    needs_local,
    reference_specs,
    shipped_point,
    suspect,
    with_budget,
)
from dlbench.data.learnable import DATA_VERSION
from dlbench.records import PointResult
from dlbench.reference import rcp
from tests.support.reports import make_point

SHIPPED_STEPS = (230, 200, 220, 210, 240)  # a GPT-like spread, read every 10 steps


def _spec(precision: str = "fp32", steps: int | None = None) -> Any:
    spec = make_point("torch", model="resnet50", batch=32).spec
    return dataclasses.replace(spec, converge=True, converge_steps=steps, precision=precision, input_size=32)


def _rcp(steps: tuple[int | None, ...] = SHIPPED_STEPS, precision: str = "fp32") -> rcp.Rcp:
    key = key_of(_spec(precision), 0.25)
    measured = rcp.Measured(
        by="test",
        date="2026-11-29",
        hardware="a CPU (cpu)",
        device="cpu",
        framework="torch",
        framework_version="2.13.0",
        dlbench_version="0.0",
        command="dlbench reference measure-convergence -m resnet50 --input-size 32 -b 32",
    )
    runs = tuple(rcp.RcpRun(seed=100 + i, steps=s) for i, s in enumerate(steps))
    return rcp.Rcp(key=key, every=10, budget=1000, measured=measured, runs=runs, file=rcp.file_name(key))


def test_a_shipped_point_round_trips_and_needs_five_runs(tmp_path: Path) -> None:
    point = _rcp()
    (tmp_path / point.file).write_text(point.to_yaml(), encoding="utf-8")
    back = rcp.load_folder(tmp_path)
    assert back == (point,) and back[0].mean == 220 and back[0].file == f"resnet50-32px-b32-fp32-d{DATA_VERSION}.yaml"
    short = _rcp((230, 200, 220, 210, None))  # one run did not reach the target: four are not a point
    with pytest.raises(rcp.RcpError, match="4 run\\(s\\) reached the target; a shipped point needs 5"):
        rcp.parse(short.to_yaml(), "short.yaml")
    with pytest.raises(rcp.RcpError, match=r"^bad\.yaml: "):
        rcp.parse(point.to_yaml().replace("every: 10", "every: 0"), "bad.yaml")


def test_a_candidate_is_judged_against_the_shipped_point_of_its_key() -> None:
    points = (_rcp(),)
    found = shipped_point(_spec(), 0.25, points)
    assert found is not None and found[1] == "" and not needs_local(_spec(), points)
    assert shipped_point(_spec(), 0.3, points) is None and needs_local(_spec(), ())  # another target: none
    bf16 = shipped_point(_spec("bf16"), 0.25, points)  # no 16-bit point: the fp32 one, said
    assert bf16 is not None and "no 16-bit reference points: judged against the fp32 ones" in bf16[1]
    ref = from_shipped(*found)
    assert ref.steps == SHIPPED_STEPS and ref.source.startswith("shipped resnet50") and ref.framework_version


def test_a_local_reference_measured_with_a_defect_present_is_suspect() -> None:
    shipped = from_shipped(_rcp())
    # References measured while a defect dropped every 4th update: 1.33x the steps, all five of them.
    defective = Reference(steps=tuple(round(s * 4 / 3, -1) for s in SHIPPED_STEPS), every=10)
    why = suspect(defective, shipped)
    assert why is not None and why.startswith(
        "reference suspect: the local runs' 294 steps are slower than the shipped point's 220"
    )
    assert suspect(Reference(steps=(220, 210, 230, 200, 240), every=10), shipped) is None  # a clean one is not


def test_a_budget_below_the_upper_edge_is_raised_until_a_run_can_read_slower() -> None:
    points = (_rcp(),)
    upper = acceptance(SHIPPED_STEPS, 10, 1)[1]
    floor = budget_floor(_spec(steps=200), points)
    assert floor is not None and upper < floor <= upper + 10 and floor % 10 == 0
    raised = with_budget(_spec(steps=200), points)
    assert raised.converge_steps == floor
    assert with_budget(_spec(steps=floor + 100), points).converge_steps == floor + 100  # enough already: kept
    note = budget_note(raised, 200)
    assert note is not None and f"raised from 200 steps to {floor}" in note and "`slower`" in note


WIDE_STEPS = (180, 220, 260, 200, 240)  # a reference of wider spread (sd 32 steps)


def _run(seed: int, steps: int | None, verdict: str = "converged") -> PointResult:
    p = make_point("torch", seed=seed)
    raw = {"verdict": verdict, "steps_to_target": steps, "reference": {"steps": list(WIDE_STEPS), "every": 10}}
    spec = dataclasses.replace(p.spec, converge=True, seed=seed)
    return dataclasses.replace(p, spec=spec, extra={VERDICT_KEY: raw})


def test_dropping_every_fourth_update_reads_slower_over_five_runs_not_over_one() -> None:
    slowed = [round(s * 4 / 3, -1) for s in (220, 200, 230, 210, 240)]  # 290, 270, 310, 280, 320
    assert acceptance(WIDE_STEPS, 10, 1)[1] > 290  # one run of 290 steps lies inside one run's band
    one = group_verdict([_run(0, int(slowed[0]))])
    assert one is not None and one.verdict == "converged"  # the finding: one run of it passes
    five = group_verdict([_run(i, int(s)) for i, s in enumerate(slowed)])
    assert five is not None and five.verdict == "slower", five.line
    assert "5 runs, fastest and slowest dropped" in five.line and "a 25% slowdown" in five.line
    clean = group_verdict([_run(i, s) for i, s in enumerate((220, 210, 230, 200, 240))])
    assert clean is not None and clean.verdict == "converged"


def test_at_most_one_run_of_n_may_fail_counted_as_the_slowest() -> None:
    one_failed = [_run(i, s) for i, s in enumerate((220, 210, 230, 200))] + [_run(4, None, "not reached")]
    g = group_verdict(one_failed)
    assert g is not None and g.verdict == "converged" and "1 not converged (counted as the slowest)" in g.line
    two_failed = [*one_failed[:3], _run(3, None, "diverged"), _run(4, None, "not reached")]
    g2 = group_verdict(two_failed)
    assert g2 is not None and g2.verdict == "diverged" and "2 of 5 runs did not converge" in g2.line


def test_local_references_are_torch_fp32_on_one_device_whatever_release_the_candidate_asked() -> None:
    candidate = dataclasses.replace(_spec("bf16"), framework="jax", release="0.10.1")
    refs = reference_specs(candidate)
    assert [r.seed for r in refs] == [100, 101, 102, 103, 104]
    assert {(r.framework, r.release, r.precision, r.world_size) for r in refs} == {("torch", None, "fp32", 1)}
