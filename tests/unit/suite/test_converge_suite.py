"""A suite's `converge:` block (#34): every point a convergence point; bad values refused in one line before anything
runs; a sweep measures the reference runs it lacks first and stores each point with its verdict (fake backend);
exclusions by layout; and the built-in convergence suites."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench import suite
from dlbench.analysis.convergence import REFERENCE_KEY, VERDICT_KEY, verdict_of
from dlbench.records import PointResult
from dlbench.refusals import Impossible, refusal
from dlbench.runapi.sweep import PreparedSweep, SweepRequest, execute_sweep, prepare_sweep
from dlbench.suite.expand import expand
from dlbench.suite.schema import SuiteError, parse_suite

CliResult = tuple[int, str, str]

SUITE = """\
name: conv
device: cpu
protocol: {preset: quick, warmup: 0, steps: 1, repeats: 1}
axes:
  framework: fake
  model: resnet50
  batch: 2
  precision: [fp32, bf16]
"""


@pytest.mark.parametrize(
    ("block", "steps", "target"),
    [
        ("converge: {steps: 300, target: null}\n", 300, None),
        ("converge: {target: 0.5}\n", None, 0.5),
        ("converge: true\n", None, None),
        ("converge: {}\n", None, None),
    ],
)
def test_a_converge_block_makes_every_point_a_convergence_point(block: str, steps: int | None, target: float) -> None:
    points = expand(parse_suite(SUITE + block, "t.yaml"), "cpu")
    assert len(points) == 2
    assert all(
        (p.spec.converge, p.spec.converge_steps, p.spec.converge_target) == (True, steps, target) for p in points
    )


@pytest.mark.parametrize("block", ["", "converge: false\n", "converge: null\n"])
def test_without_the_block_no_point_converges(block: str) -> None:
    assert not any(p.spec.converge for p in expand(parse_suite(SUITE + block, "t.yaml"), "cpu"))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (SUITE + "converge: {steps: 0}\n", "t.yaml:9: converge: steps must be at least 1; got 0"),
        (SUITE + "converge: {steps: -3}\n", "t.yaml:9: converge: steps must be at least 1; got -3"),
        (SUITE + "converge: {target: 0.0}\n", "t.yaml:9: converge: target 0 is at or below the best possible loss"),
        (
            SUITE.replace("model: resnet50", "model: [resnet50, gpt2_small]") + "converge: {target: 1.0}\n",
            "t.yaml:9: converge: target 1 is at or below the best possible loss of gpt2_small",
        ),
        (
            SUITE.replace("model: resnet50", "model: [resnet50, face]") + "converge: true\n",
            "t.yaml:9: converge: there is no target for face (face_recognition)",
        ),
        (SUITE + "converge: {budget: 5}\n", "t.yaml:9: converge.budget: unknown key"),
        (SUITE + "converge: {target: .nan}\n", "t.yaml:9: converge.target:"),
        (
            SUITE.replace("precision: [fp32, bf16]", "data: [synthetic, real]") + "converge: true\n",
            "t.yaml:9: converge: convergence points train on learnable data",
        ),
    ],
)
def test_bad_converge_values_are_one_line_naming_file_line_and_key(text: str, where: str) -> None:
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "t.yaml")
    assert str(info.value).startswith(where), str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_block_exits_2_before_anything_runs_even_skipping_impossible_cells(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        SUITE.replace("model: resnet50", "model: [resnet50, face]") + "skip_impossible: true\nconverge: true\n"
    )
    db = tmp_path / "s.db"
    code, out, err = cli("sweep", str(f), "--store", str(db))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"dlbench: error: {f}:10: converge: there is no target for face (face_recognition): image classifiers, "
        "decoders, BERT, Wide & Deep, DLRM and DiTs have one"
    )
    assert not db.exists()


def test_a_framework_without_learnable_data_is_a_cell_refused_or_skipped(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SUITE.replace("framework: fake", "framework: [fake, keras_jax]") + "converge: true\n")
    with pytest.raises(Impossible, match="no learnable data wired for keras_jax"):
        prepare_sweep(SweepRequest(suite_name=str(f), dry_run=True, store_path=str(tmp_path / "s.db")))
    said: list[str] = []
    planned = prepare_sweep(
        SweepRequest(suite_name=str(f), dry_run=True, skip_impossible=True, store_path=str(tmp_path / "s.db")),
        note=said.append,
    )
    assert {p.spec.framework for p in planned.planned} == {"fake"}
    assert len(said) == 2 and all("no learnable data wired for keras_jax" in line for line in said)


def test_a_sweep_measures_the_references_first_and_stores_each_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99")
    f = tmp_path / "s.yaml"
    f.write_text(SUITE + "converge: {steps: 300}\n")
    db = tmp_path / "s.db"

    def sweep() -> list[PointResult]:
        prepared = prepare_sweep(SweepRequest(suite_name=str(f), store_path=str(db)))
        assert isinstance(prepared, PreparedSweep)
        return list(execute_sweep(prepared).results)

    first = sweep()
    refs = [r for r in first if r.extra.get(REFERENCE_KEY)]
    assert [(r.spec.seed, r.spec.precision, r.spec.converge_steps) for r in refs] == [
        (s, "fp32", 300) for s in range(100, 105)
    ]
    points = [r for r in first if not r.extra.get(REFERENCE_KEY)]
    assert [r.spec.precision for r in points] == ["fp32", "bf16"]
    for r in points:
        verdict = r.extra[VERDICT_KEY]
        assert isinstance(verdict, dict)
        assert verdict["verdict"] == "converged" and "5 run(s)" in verdict["reference_line"]
        assert r.extra["batch_group"] == "2"  # still a sweep point

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99:nan_at:50")  # the same suite, now broken: references reused
    second = sweep()
    assert len(second) == 2 and [verdict_of(r) for r in second] == ["diverged", "diverged"]


LAYOUTS = """\
name: lay
device: cpu
skip_impossible: true
axes:
  framework: fake
  model: [resnet50, gpt]
  strategy: [none, ddp]
params: {hidden: 64, layers: 2, heads: 2, seq: 32, vocab: 64}
layouts:
  - {name: one, scale: 1n1c, batch: 4}
  - {name: dp2, scale: 1n2c, batch: 4}
  - {name: tp2, scale: 1n2c, batch: 4, tensor_parallel: 2}
exclude:
  - {layout: one, strategy: ddp}
  - {layout: dp2, strategy: none}
  - {layout: tp2, model: resnet50}
  - {layout: tp2, strategy: ddp}
"""


def test_exclusions_name_layouts() -> None:
    points = expand(parse_suite(LAYOUTS, "t.yaml"), "cpu")
    got = {(p.spec.model, p.batch_group, p.spec.strategy) for p in points}
    assert got == {
        ("resnet50", "one", "none"),
        ("resnet50", "dp2", "ddp"),
        ("gpt", "one", "none"),
        ("gpt", "dp2", "ddp"),
        ("gpt", "tp2", "none"),
    }
    scaled = parse_suite(LAYOUTS + "  - {scale: 1n2c, model: gpt}\n", "t.yaml")  # a layout's scale is matched
    assert {(p.spec.model, p.batch_group) for p in expand(scaled, "cpu")} == {
        ("resnet50", "one"),
        ("resnet50", "dp2"),
        ("gpt", "one"),
    }


def test_an_exclusion_naming_an_unknown_layout_is_refused() -> None:
    with pytest.raises(SuiteError, match="exclude: layout 'pp2' is none of the suite's layouts"):
        parse_suite(LAYOUTS + "  - {layout: pp2}\n", "t.yaml")
    with pytest.raises(SuiteError, match="layout 'one' is none of the suite's layouts"):
        parse_suite(SUITE + "exclude: [{layout: one}]\n", "t.yaml")


def _everything_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dlbench.suite.expand.installed", lambda _backend: True)


def test_convergence_cpu_crosses_frameworks_precisions_strategies_and_layouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _everything_installed(monkeypatch)
    s = suite.load("convergence-cpu")
    assert s.converge is not None and s.skip_impossible and s.device == "cpu"
    points = expand(s, "cpu", "/d")
    assert all(p.spec.converge for p in points)
    runnable = [p.spec for p in points if refusal(p.spec) is None]
    torch = [sp for sp in runnable if sp.framework == "torch"]
    assert {sp.precision for sp in torch} == {"fp32", "bf16"}
    assert {sp.strategy for sp in torch if sp.model == "resnet50" and sp.world_size == 2} >= {"ddp", "allreduce"}
    gpt_layouts = {
        (sp.layout.tensor_parallel, sp.layout.pipeline_parallel)
        for sp in torch
        if sp.model == "gpt" and sp.world_size == 2
    }
    assert {(2, 1), (1, 2)} <= gpt_layouts
    assert {p.spec.framework for p in points} == {"torch", "jax"}


def test_convergence_h100_uses_full_size_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    _everything_installed(monkeypatch)
    s = suite.load("convergence-h100")
    assert s.converge is not None and s.device == "cuda" and "not run on a gpu yet" in s.description.lower()
    runnable = [p.spec for p in expand(s, "cuda", "/d") if refusal(p.spec) is None]
    image = [sp for sp in runnable if sp.model == "resnet50"]
    gpt = [sp for sp in runnable if sp.model == "gpt2_small"]
    assert image and all(sp.input_size is None and sp.batch_size == 64 for sp in image)  # 224 px, its own batch
    assert gpt and all(sp.params == {} and sp.batch_size == 8 for sp in gpt)  # GPT-2 small's full shape
    assert {sp.world_size for sp in runnable} == {1, 8}
