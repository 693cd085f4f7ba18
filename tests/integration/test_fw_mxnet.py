"""MXNet (Gluon) in its own environment: exact parameter counts, convergence, one real point, refusals.

Each check runs `python -m dlbench.check ...` (or a worker) with the mxnet environment's interpreter, so
this file never imports mxnet. Without that environment every test skips, naming it (`dlbench setup mxnet`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import check_loss_falls, framework_python, run_check
from fw_helpers import assert_compiled_point, assert_param_counts
from real_helpers import check_real_points, check_too_few_samples, make_real_data

from dlbench.store.store import Store

pytestmark = [pytest.mark.framework("mxnet"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "mxnet", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# (input size, batch): near the smallest input each architecture accepts (AlexNet's three 3/2 max-pools need
# 64, Inception v3 75; BERT runs 16 tokens). AlexNet's two p=0.5 dropouts make the loss of a 2-image batch
# jump around once it is memorised (6.8 -> 0.3 -> 9.1 seen); on 8 images it keeps falling.
TINY = {"resnet50": (32, 2), "resnet152": (32, 2), "vgg16": (32, 2), "alexnet": (64, 8),
        "inception_v3": (75, 2), "bert_base": (16, 2)}


@pytest.fixture(scope="module")
def mxnet_python() -> str:
    """The mxnet environment's interpreter, or a skip naming it."""
    return framework_python("mxnet")


def test_parameter_counts_of_all_cases(mxnet_python: str) -> None:
    assert_param_counts(mxnet_python, "mxnet", "1.9.1", TINY)  # the six built here exactly


@pytest.mark.parametrize("model", list(TINY))
def test_loss_falls_in_20_steps(mxnet_python: str, model: str) -> None:
    check_loss_falls(mxnet_python, "mxnet", model, *TINY[model])


def test_one_hybridized_point_through_the_cli(mxnet_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    assert_compiled_point(cli, store_path, POINT, "resnet50", "32", "mxnet", "1.9.1", "hybridize(static_alloc, static_shape)")


def test_hybridized_bert_trains(mxnet_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, err = cli("run", *POINT, "-m", "bert_base", "--input-size", "16", "--compile", "--store", str(store_path))
    assert code == 0, err
    [p] = [s.result for s in Store(store_path).points()]
    assert p.status == "ok" and p.metrics is not None and math.isfinite(p.metrics.final_loss or math.nan), p.error


def test_channels_last_is_refused_with_a_reason(mxnet_python: str, cli: Callable[..., CliResult],
                                                store_path: Path) -> None:
    code, _, _ = cli("run", *POINT, "-m", "resnet50", "--input-size", "32", "--channels-last",
                     "--store", str(store_path))
    [p] = [s.result for s in Store(store_path).points()]
    assert code == 0 and p.status == "unsupported"  # a refused point is not a failure (exit 0)
    assert "NCHW only" in (p.error or "")


def test_bf16_is_refused_where_onednn_lacks_bf16_kernels(mxnet_python: str) -> None:
    answer = run_check(mxnet_python, "converge", "mxnet", "resnet50", "--steps", "2", "--batch", "2",
                       "--input-size", "32", "--precision", "bf16")
    if "losses" in answer:
        pytest.skip("this CPU has oneDNN bf16 kernels: MXNet's bf16 AMP runs, so there is nothing to refuse")
    assert "no oneDNN bf16 kernels on this CPU" in str(answer["unsupported"])


def test_real_data_through_the_gluon_dataloader(mxnet_python: str, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    check_real_points(cli, POINT, make_real_data(tmp_path), "gluon DataLoader, 2 worker processes")


def test_real_data_with_fewer_samples_than_a_batch_is_an_error(mxnet_python: str, cli: Callable[..., CliResult],
                                                               tmp_path: Path) -> None:
    check_too_few_samples(cli, POINT, tmp_path)
