"""A defect active while references are measured (#44), planted through the worker's own interpreter (a
`sitecustomize` on the workers' PYTHONPATH drops every 4th update of the fake backend's step), not through a flag of
dlbench: every process this environment starts carries it, reference runs included. Local references measured here
move with it, so the defective candidate reads `converged` against them, and only their check against the shipped
point says `reference suspect`; judged against the shipped Wide & Deep point (measured elsewhere, shipped as data)
the same candidate reads `slower`. End to end through the run API, with the fake backend's loss curve: seconds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlbench.analysis.convergence import REFERENCE_KEY, VERDICT_KEY
from dlbench.points import Axes, Shared
from dlbench.runapi.run import RunHooks, RunRequest, execute_run, prepare_run
from dlbench.spec import Protocol

SITECUSTOMIZE = """
import os

if os.environ.get("PLANTED_DEFECT") == "drop_every_4th_update":
    from dlbench.backends import fake

    _step = fake.FakeTrainer.train_step

    def _train_step(self, batch):
        factor = self.factor
        if (self.steps + 1) % 4 == 0:  # this update is lost: the loss stays where it was
            self.factor = 1.0
        try:
            _step(self, batch)
        finally:
            self.factor = factor

    fake.FakeTrainer.train_step = _train_step
"""
# The fake curve multiplies its loss by this every step: its first window at or below W&D's target (0.44) ends at
# step 50, as the shipped point's runs (50, 50, 60, 50, 50); with every 4th update lost it ends at step 70.
FACTOR = 0.9816


def _verdicts(reference: str, tmp_path: Path) -> list[dict[str, object]]:
    req = RunRequest(
        axes=Axes(frameworks=("fake",), models=("wide_deep",), batches=(512,)),
        shared=Shared(
            protocol=Protocol(0, 1, 1, "median", preset="quick"), converge=True, converge_reference=reference
        ),
        store_path=str(tmp_path / f"{reference}.db"),
    )
    outcome = execute_run(prepare_run(req), RunHooks(note=lambda line: None))
    out = []
    for r in outcome.results:
        verdict = r.extra[VERDICT_KEY]
        assert isinstance(verdict, dict)
        out.append({**verdict, "reference_run": bool(r.extra.get(REFERENCE_KEY))})
    return out


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("DLBENCH_FAKE", f"curve:{FACTOR}")


def test_clean_the_candidate_converges_against_the_shipped_point(planted: None, tmp_path: Path) -> None:
    [candidate] = _verdicts("shipped", tmp_path)
    assert candidate["verdict"] == "converged" and candidate["steps_to_target"] == 50, candidate
    assert "shipped wide_deep-b512-fp32-d1.yaml" in str(candidate["reference_line"]), candidate["reference_line"]


def test_a_defect_present_while_references_are_measured_is_caught_by_the_shipped_point(
    planted: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANTED_DEFECT", "drop_every_4th_update")
    *local_refs, fooled = _verdicts("local", tmp_path)
    assert [r["reference_run"] for r in local_refs] == [True] * 5
    assert all(r["steps_to_target"] == 70 for r in local_refs)  # the references carry the defect
    assert fooled["verdict"] == "converged" and fooled["steps_to_target"] == 70  # against them it passes,
    assert "reference suspect" in str(fooled["reference_line"]), fooled["reference_line"]  # but they are suspect
    [judged] = _verdicts("shipped", tmp_path)  # against the shipped point, which no defect here can move
    assert judged["verdict"] == "slower" and judged["steps_to_target"] == 70, judged
