"""PaddlePaddle in its own environment: exact parameter counts, convergence, real points, refusals.

Each check runs `python -m dlbench.check ...` (or a worker) with the paddle environment's interpreter, so
this file never imports paddle. Without that environment every test skips, naming it (`dlbench setup
paddle`). Paddle is slow on this CPU (ResNet-50 at batch 8, 224x224: 7-13 s a step), so inputs are tiny.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import convergence_cases, framework_python, run_check

from dlbench.cases import all_cases, get_case
from dlbench.results.store import Store

pytestmark = [pytest.mark.framework("paddle"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "paddle", "--input-size", "32", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# The smallest inputs each architecture accepts: AlexNet's three 3/2 max-pools need 64, Inception v3
# needs 75 (torchvision's minimum); BERT runs a 16-token sequence.
TINY = {"resnet50": 32, "resnet152": 32, "vgg16": 32, "alexnet": 64, "inception_v3": 75, "bert_base": 16}
# Batch 2 by default. VGG-16 and AlexNet have no batch norm: at batch 2 the seeds' momentum SGD memorises
# the batch within ~15 steps and then overshoots (the torch backend does the same), so they take one sample.
BATCH = {"vgg16": 1, "alexnet": 1}


@pytest.fixture(scope="module")
def paddle_python() -> str:
    """The paddle environment's interpreter, or a skip naming it."""
    return framework_python("paddle")


def test_parameter_counts_of_all_cases(paddle_python: str) -> None:
    answer = run_check(paddle_python, "params", "paddle")
    assert str(answer["version"]).startswith("3.")
    for case in all_cases():
        assert answer[case.name] == case.params, case.name


@pytest.mark.parametrize("model", convergence_cases(list(TINY)))
def test_loss_falls_in_20_steps(paddle_python: str, model: str) -> None:
    answer = run_check(paddle_python, "converge", "paddle", model, "--steps", "20",
                       "--batch", str(BATCH.get(model, 2)), "--input-size", str(TINY[model]))
    losses = answer["losses"]
    assert isinstance(losses, list) and len(losses) == 20
    assert not any(math.isnan(loss) for loss in losses), losses
    assert losses[-1] < losses[0], losses


def test_one_real_point_through_the_cli(paddle_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, err = cli("run", *POINT, "-m", "resnet50", "--store", str(store_path))
    assert code == 0, err
    [p] = [s.result for s in Store(store_path).points()]
    assert p.status == "ok" and p.metrics is not None and p.metrics.throughput > 0
    assert p.env.identity["framework"] == "paddle"
    assert p.env.identity["framework_version"].startswith("3.")
    assert p.env.descriptive["paddle_threads"] == p.env.identity["threads"]  # paddle runs the threads asked for
    assert p.extra.get("compiled") == "eager"
    assert [len(r.step_times) for r in p.ranks[0].repeats] == [2]
    assert get_case(p.spec.model).params == 25_557_032


def test_to_static_point(paddle_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, err = cli("run", *POINT, "-m", "resnet50", "--compile", "--store", str(store_path))
    assert code == 0, err
    [p] = [s.result for s in Store(store_path).points()]
    assert p.status == "ok" and p.spec.compile
    assert p.extra.get("compiled") == "paddle.jit.to_static(full_graph=True)"


def test_real_data_point(paddle_python: str, cli: Callable[..., CliResult], store_path: Path,
                         tmp_path: Path) -> None:
    data = tmp_path / "images"
    code, _, err = cli("data", "imagenet", "--images", "8", "--classes", "2", "--min-side", "48",
                       "--max-side", "80", "--out", str(data))
    assert code == 0, err
    code, _, err = cli("run", *POINT, "-m", "resnet50", "--data", "real", "--data-dir", str(data),
                       "--store", str(store_path))
    assert code == 0, err
    [p] = [s.result for s in Store(store_path).points()]
    assert p.status == "ok" and p.spec.data == "real"
    assert p.ranks[0].input_wait_s >= 0.0


def test_amp_on_the_cpu_trains_or_is_refused_with_a_reason(paddle_python: str) -> None:
    answer = run_check(paddle_python, "converge", "paddle", "resnet50", "--steps", "2", "--batch", "2",
                       "--input-size", "32", "--precision", "amp")
    if "unsupported" in answer:  # a CPU without native bfloat16, as this machine's
        assert "leaves every op in float32" in str(answer["unsupported"])
    else:
        losses = answer["losses"]
        assert isinstance(losses, list) and not any(math.isnan(loss) for loss in losses), losses


def test_channels_last_is_refused_with_a_reason(paddle_python: str, cli: Callable[..., CliResult],
                                                store_path: Path) -> None:
    code, _, _ = cli("run", *POINT, "-m", "resnet50", "--channels-last", "--store", str(store_path))
    [p] = [s.result for s in Store(store_path).points()]
    assert code == 1 and p.status == "unsupported"
    assert "NCHW models only" in (p.error or "")
