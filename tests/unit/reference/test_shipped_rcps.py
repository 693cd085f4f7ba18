"""The reference convergence points shipped with dlbench (#44): each file follows the schema, holds at least 5
runs that reached the target, was measured by `dlbench reference measure-convergence` (its command kept), and
still matches what `--converge` trains today (the case's target loss and the data generator's version: a stale
point would judge new data by old steps); `dlbench reference convergence` lists each, its numbers whole at 60 and
80 columns and every line within them, the measuring commands wrapped whole; a budget that would hide `slower`
from a suite is raised; and a small BERT's --converge point is judged against its shipped point."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable

import pytest

from dlbench.analysis.references import budget_floor, needs_local, shipped_point, with_budget
from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.data.learnable import DATA_VERSION
from dlbench.reference import rcp
from dlbench.report.rcp import INDENT
from dlbench.runapi.converge import plan_lines
from dlbench.spec import PointSpec, Protocol

CliResult = tuple[int, str, str]
# The cases docs/convergence.md says have a shipped point (at least).
SHIPPED_MODELS = {"gpt", "wide_deep", "resnet50", "llama_tiny", "bert_base"}
SUITE_GPT = {"hidden": 128, "layers": 2, "heads": 4, "seq": 32, "vocab": 64}  # convergence-cpu's GPT
SMALL_BERT = {"hidden": 128, "layers": 2, "heads": 2, "seq": 8, "vocab": 128}  # BERT's shipped point (docs)
SMALL_BERT_BATCH = 32


def test_every_shipped_point_is_whole_and_matches_todays_targets() -> None:
    points = rcp.shipped()
    assert SHIPPED_MODELS <= {p.key.model for p in points}
    for p in points:
        assert len(p.steps) >= rcp.MIN_RUNS and p.file == rcp.file_name(p.key)
        assert p.measured.command.startswith("dlbench reference measure-convergence -m ")
        assert p.key.data_version == DATA_VERSION and p.measured.framework == "torch"
        target = target_for(get_case(p.key.model).configured(dict(p.key.params)))
        assert target is not None and abs(target.loss - p.key.target_loss) < 1e-6, p.file
        assert [r.seed for r in p.runs] == list(range(100, 100 + len(p.runs)))


def _gpt(budget: int | None) -> PointSpec:
    return PointSpec(
        framework="torch",
        model="gpt",
        batch_size=32,
        protocol=Protocol(1, 2, 1, "median"),
        converge=True,
        converge_steps=budget,
        case_params=tuple(sorted(SUITE_GPT.items())),
    )


def test_the_suites_gpt_is_judged_against_its_shipped_point_and_its_budget_can_say_slower() -> None:
    spec = _gpt(300)  # convergence-cpu's budget
    assert not needs_local(spec)  # no local reference run is measured for it
    assert plan_lines([], [spec])[0].startswith("--converge: every verdict is judged against a shipped reference")
    floor = budget_floor(spec)
    assert floor is not None
    assert with_budget(spec).converge_steps == max(300, floor)
    assert with_budget(dataclasses.replace(spec, converge_steps=10)).converge_steps == floor


def test_a_small_berts_converge_point_is_judged_against_its_shipped_point() -> None:
    """`dlbench run -m bert_base --param hidden=128 ... -b 32 --converge` (docs/convergence.md) measures no local
    reference: the shipped point judges it, and its budget (the case's 1000 steps) can read `slower`."""
    spec = PointSpec(
        framework="torch",
        model="bert_base",
        batch_size=SMALL_BERT_BATCH,
        protocol=Protocol(1, 2, 1, "median"),
        converge=True,
        case_params=tuple(sorted(SMALL_BERT.items())),
    )
    target = target_for(get_case("bert_base").configured(SMALL_BERT))
    assert target is not None
    found = shipped_point(spec, target.loss)
    assert found is not None and found[1] == "" and not needs_local(spec)
    point = found[0]
    assert point.key.params == tuple(sorted(SMALL_BERT.items())) and point.key.batch == SMALL_BERT_BATCH
    floor = budget_floor(spec)
    assert floor is not None and floor <= target.budget and with_budget(spec).converge_steps is None
    assert needs_local(dataclasses.replace(spec, batch_size=8))  # another batch: local reference runs are measured
    assert plan_lines([], [spec])[0].startswith("--converge: every verdict is judged against a shipped reference")


@pytest.mark.parametrize("width", [60, 80])
def test_reference_convergence_lists_each_point_whole(
    width: int, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = cli("reference", "convergence")
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)  # the commands too
    for p in rcp.shipped():
        row = next(line for line in lines if line.startswith(p.key.model + " "))
        assert f"{len(p.steps)}/{len(p.runs)}" in row and re.search(rf"\b{p.mean:.0f}\b", row), row
        # The file and its command whole and in order (wrapped at spaces, a name longer than a line folded).
        assert "".join(f"{p.file}: {p.measured.command}".split()) in "".join(out.split())
        assert any(line.startswith(INDENT + "--") for line in lines)  # continuation lines are indented
    code, out, _ = cli("reference", "convergence", "--format", "json")
    assert code == 0 and {d["key"]["model"] for d in json.loads(out)} >= SHIPPED_MODELS
