"""`dlbench run`'s smaller checks: --device cuda without a GPU is bad input, input sizes the architecture refuses,
no 1-device baseline for a model-parallel maximum."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cases import get_case
from dlbench.cases.inputs import min_input_size
from dlbench.records import PointResult
from dlbench.spec import SpecError
from tests.support.reports import make_point

CliResult = tuple[int, str, str]


def test_cuda_without_a_gpu_is_bad_input(
    cli: Callable[..., CliResult], store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dlbench.runapi.gate.cuda_available", lambda: False)
    code, out, err = cli("run", "-f", "fake", "-m", "resnet50", "--device", "cuda", "--store", str(store_path))
    assert code == 2 and "--device cuda" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1
    assert not store_path.exists() and out == ""


@pytest.mark.parametrize(
    ("model", "least"),
    [
        ("resnet50", 32),
        ("face", 32),
        ("vgg16", 32),
        ("alexnet", 63),
        ("inception_v3", 75),
        ("bert_base", 2),
        ("gpt2_small", 1),
    ],
)
def test_each_case_s_smallest_input(model: str, least: int) -> None:
    case = get_case(model)
    assert min_input_size(case) == least
    case.check_input_size(least)
    if least > 1:
        with pytest.raises(SpecError, match=f"too small for {case.name}: its architecture takes at least {least}"):
            case.check_input_size(least - 1)


@pytest.mark.parametrize("mode", [("model_parallel=1",), ("model_parallel=1", "sample=10"), ()])
def test_a_model_parallel_maximum_gets_no_one_device_baseline(
    cli: Callable[..., CliResult], store_path: Path, monkeypatch: pytest.MonkeyPatch, mode: tuple[str, ...]
) -> None:
    """The face README commands: the search (stubbed here) finds a 1n2c maximum; one device must run out of memory
    at a model-parallel or Partial FC maximum, so no baseline is measured for it (the full mode keeps its own)."""
    import dlbench.runapi.run as run_cli

    def found(
        store: object,
        specs: list,
        name: str,
        launchers: object,  # type: ignore[type-arg]
        note: object = None,
        command: str = "",
    ) -> tuple[list, list, dict]:  # type: ignore[type-arg]
        at = [dataclasses.replace(s, case_params=tuple(sorted({**s.params, name: 98_000}.items()))) for s in specs]
        return at, [], {s.key(): {"max_param": {"name": name, "max": 98_000}} for s in at}

    ran: list[object] = []

    def run_points(store: object, run_id: str, specs: list, *a: object, **k: object) -> list[PointResult]:  # type: ignore[type-arg]
        ran.extend(specs)
        return [make_point("fake", model="face", batch=4)]

    monkeypatch.setattr(run_cli, "search_param", found)
    monkeypatch.setattr(run_cli, "run_points", run_points)
    args = [a for m in mode for a in ("--param", m)]
    cli(
        "run",
        "-f",
        "fake",
        "-m",
        "face",
        "-b",
        "4",
        "--scale",
        "1n2c",
        "--strategy",
        "ddp",
        "--param",
        "classes=max",
        *args,
        "--memory-limit",
        "1GiB",
        "--device",
        "cpu",
        "--store",
        str(store_path),
    )
    scales = sorted(s.scale for s in ran)  # type: ignore[attr-defined]
    assert scales == (["1n2c"] if mode else ["1n1c", "1n2c"])
