"""OneFlow in its own environment (Python 3.8-3.10): exact parameter counts, convergence, eager and nn.Graph
points, real data, two DDP ranks on the CPU, refusals.

Each check runs `python -m dlbench.check ...` (or a worker) with the oneflow environment's interpreter, so
this file never imports oneflow. Without that environment every test skips, naming it (`dlbench setup oneflow`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import check_loss_falls, convergence_cases, framework_python
from fw_helpers import assert_compiled_point, assert_param_counts, assert_refused
from real_helpers import check_real_points, check_too_few_samples, make_real_data
from scale_helpers import assert_ranks_in_sync, stored

pytestmark = [pytest.mark.framework("oneflow"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "oneflow", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# (input size, batch): near the smallest input each architecture accepts (AlexNet's three 3/2 max-pools need
# 64, Inception v3 75; BERT runs 16 tokens). The ResNets train at 64: at 32 their last batch norms see 1x1 maps
# of 2 images, and OneFlow's loss, once memorised (0.08 by step 6), went to NaN. AlexNet's two p=0.5 dropouts
# make the loss of a memorised 2-image batch jump around, so it trains on 8 images.
TINY = {"resnet50": (64, 2), "resnet152": (64, 2), "vgg16": (32, 2), "alexnet": (64, 8),
        "inception_v3": (75, 2), "bert_base": (16, 2)}


@pytest.fixture(scope="module")
def oneflow_python() -> str:
    """The oneflow environment's interpreter, or a skip naming it."""
    return framework_python("oneflow")


def test_parameter_counts_of_all_cases(oneflow_python: str) -> None:
    assert_param_counts(oneflow_python, "oneflow", "0.9.0", TINY)  # the six built here exactly


@pytest.mark.parametrize("model", convergence_cases(list(TINY)))
def test_loss_falls_in_20_steps(oneflow_python: str, model: str) -> None:
    check_loss_falls(oneflow_python, "oneflow", model, *TINY[model])


@pytest.mark.parametrize(("model", "size"), [("resnet50", "32"), ("bert_base", "16")])
def test_one_graph_point_through_the_cli(oneflow_python: str, cli: Callable[..., CliResult], store_path: Path, model: str, size: str) -> None:
    assert_compiled_point(cli, store_path, POINT, model, size, "oneflow", "0.9.0", "oneflow.nn.Graph")


def test_reduced_precision_is_refused_with_a_reason(oneflow_python: str, cli: Callable[..., CliResult],
                                                    store_path: Path) -> None:
    assert_refused(cli, store_path, POINT, "32", "bf16", "fp32 only")


def test_two_ddp_ranks_on_the_cpu_stay_in_sync(oneflow_python: str, cli: Callable[..., CliResult],
                                               store_path: Path) -> None:
    # At 32 pixels the last stage's batch norm sees 1x1 maps of 2 images; OneFlow 0.9's DDP then went to NaN on
    # the second step (one process does not). At 64 (2x2 maps) the ranks train and stay in sync.
    code, _, err = cli("run", *POINT, "-m", "resnet50", "--input-size", "64", "--devices-per-node", "2",
                       "--threads", "1", "--store", str(store_path))
    assert code == 0, err
    r = stored(store_path)[-1]
    assert r.spec.world_size == 2
    assert_ranks_in_sync(r, 2)  # status ok, both ranks' samples, one checksum, global batch 2 x 2
    assert r.env.descriptive["strategy_run"] == "ddp"


def test_real_data_through_the_oneflow_dataloader(oneflow_python: str, cli: Callable[..., CliResult],
                                                  tmp_path: Path) -> None:
    check_real_points(cli, POINT, make_real_data(tmp_path), "oneflow DataLoader, 2 workers")


def test_real_data_with_fewer_samples_than_a_batch_is_an_error(oneflow_python: str, cli: Callable[..., CliResult],
                                                               tmp_path: Path) -> None:
    check_too_few_samples(cli, POINT, tmp_path)
