"""MindSpore in its own environment: exact parameter counts, convergence, one real point, real data,
refusals.

Each check runs `python -m dlbench.check ...` (or a worker) with the mindspore environment's interpreter,
so this file never imports mindspore. Without that environment every test skips, naming it
(`dlbench setup mindspore`). Convergence runs PyNative; the CLI point runs the ms.jit graph.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import check_loss_falls, framework_python, run_check
from fw_helpers import assert_compiled_point, assert_param_counts
from real_helpers import check_real_points, check_too_few_samples, make_real_data

from dlbench.store.store import Store

pytestmark = [pytest.mark.framework("mindspore"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "mindspore", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# (input size, batch): near the smallest input each architecture accepts (AlexNet's three 3/2 max-pools need
# 64, Inception v3 75; BERT runs 16 tokens). AlexNet's two p=0.5 dropouts make the loss of a 2-image batch
# jump around once it is memorised (6.8 -> 0.3 -> 9.1 seen); on 8 images it keeps falling. VGG-16's two
# dropouts do the same on 2 images (6.88 -> 0.47 -> 11.17 -> 0.31 seen in one run, 9.28 at step 20 in another).
TINY = {"resnet50": (32, 2), "resnet152": (32, 2), "vgg16": (32, 8), "alexnet": (64, 8),
        "inception_v3": (75, 2), "bert_base": (16, 2)}


@pytest.fixture(scope="module")
def ms_python() -> str:
    """The mindspore environment's interpreter, or a skip naming it."""
    return framework_python("mindspore")


def test_parameter_counts_of_all_cases(ms_python: str) -> None:
    assert_param_counts(ms_python, "mindspore", "2.", TINY)  # the six built here exactly


@pytest.mark.parametrize("model", list(TINY))
def test_loss_falls_in_20_steps(ms_python: str, model: str) -> None:
    check_loss_falls(ms_python, "mindspore", model, *TINY[model])


def test_one_graph_mode_point_through_the_cli(ms_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    assert_compiled_point(cli, store_path, POINT, "resnet50", "32", "mindspore", "2.", "ms.jit (graph mode)")


def test_real_data_through_mindspore_dataset(ms_python: str, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    # ResNet-50 in graph mode (a new batch every step into one compiled graph), BERT in PyNative.
    check_real_points(cli, POINT, make_real_data(tmp_path), "mindspore.dataset",
                      runs=(("resnet50", "32", ("--compile",)), ("bert_base", "16", ())))


def test_real_data_with_fewer_samples_than_a_batch_is_an_error(ms_python: str, cli: Callable[..., CliResult],
                                                               tmp_path: Path) -> None:
    check_too_few_samples(cli, POINT, tmp_path)


@pytest.mark.parametrize(("precision", "reason"), [("amp", "for GPUs"), ("bf16", "no bf16"), ("tf32", "NVIDIA GPUs")])
def test_reduced_precisions_are_refused_on_the_cpu(ms_python: str, precision: str, reason: str) -> None:
    answer = run_check(ms_python, "converge", "mindspore", "resnet50", "--steps", "2", "--batch", "2",
                       "--input-size", "32", "--precision", precision)
    assert reason in str(answer.get("unsupported")), answer


def test_channels_last_is_refused_with_a_reason(ms_python: str, cli: Callable[..., CliResult],
                                                store_path: Path) -> None:
    code, _, _ = cli("run", *POINT, "-m", "resnet50", "--input-size", "32", "--channels-last",
                     "--store", str(store_path))
    [p] = [s.result for s in Store(store_path).points()]
    assert code == 0 and p.status == "unsupported"  # a refused point is not a failure (exit 0)
    assert "NCHW only" in (p.error or "")
