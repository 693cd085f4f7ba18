"""MegEngine in its own environment (Python 3.8-3.10): exact parameter counts, convergence, eager and traced
points, real data, refusals (several processes on the CPU).

Each check runs `python -m dlbench.check ...` (or a worker) with the megengine environment's interpreter, so
this file never imports megengine. Without that environment every test skips, naming it
(`dlbench setup megengine`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import check_loss_falls, convergence_cases, framework_python
from fw_helpers import assert_compiled_point, assert_param_counts, assert_refused
from real_helpers import check_real_points, check_too_few_samples, make_real_data
from scale_helpers import stored

pytestmark = [pytest.mark.framework("megengine"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "megengine", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# (input size, batch): near the smallest input each architecture accepts (AlexNet's three 3/2 max-pools need
# 64, Inception v3 75; BERT runs 16 tokens). The ResNets train at 64: at 32 their last batch norms see 1x1 maps
# of 2 images, and MegEngine's loss then jumped (9.5 -> 32 -> 0) where it falls smoothly at 64. AlexNet's two
# p=0.5 dropouts make the loss of a memorised 2-image batch jump around, so it trains on 8 images.
TINY = {"resnet50": (64, 2), "resnet152": (64, 2), "vgg16": (32, 2), "alexnet": (64, 8),
        "inception_v3": (75, 2), "bert_base": (16, 2)}


@pytest.fixture(scope="module")
def megengine_python() -> str:
    """The megengine environment's interpreter, or a skip naming it."""
    return framework_python("megengine")


def test_parameter_counts_of_all_cases(megengine_python: str) -> None:
    assert_param_counts(megengine_python, "megengine", "1.13.0", TINY)  # the six built here exactly


@pytest.mark.parametrize("model", convergence_cases(list(TINY)))
def test_loss_falls_in_20_steps(megengine_python: str, model: str) -> None:
    check_loss_falls(megengine_python, "megengine", model, *TINY[model])


@pytest.mark.parametrize(("model", "size"), [("resnet50", "64"), ("bert_base", "16")])
def test_one_traced_point_through_the_cli(megengine_python: str, cli: Callable[..., CliResult], store_path: Path, model: str, size: str) -> None:
    assert_compiled_point(cli, store_path, POINT, model, size, "megengine", "1.13.0", "megengine.jit.trace(symbolic=True)")


def test_several_cpu_processes_are_refused_in_one_line(megengine_python: str, cli: Callable[..., CliResult],
                                                       store_path: Path) -> None:
    cli("run", *POINT, "-m", "resnet50", "--input-size", "64", "--devices-per-node", "2", "--threads", "1",
        "--store", str(store_path))
    r = stored(store_path)[-1]
    assert r.spec.world_size == 2 and r.status == "unsupported"
    assert "no CPU collective backend" in str(r.error) and "\n" not in str(r.error)


def test_reduced_precision_is_refused_with_a_reason(megengine_python: str, cli: Callable[..., CliResult],
                                                    store_path: Path) -> None:
    assert_refused(cli, store_path, POINT, "64", "bf16", "fp32 only")


def test_real_data_through_the_megengine_dataloader(megengine_python: str, cli: Callable[..., CliResult],
                                                    tmp_path: Path) -> None:
    check_real_points(cli, POINT, make_real_data(tmp_path), "megengine DataLoader, 2 worker processes",
                      runs=(("resnet50", "64", ()), ("bert_base", "16", ())))


def test_real_data_with_fewer_samples_than_a_batch_is_an_error(megengine_python: str,
                                                               cli: Callable[..., CliResult],
                                                               tmp_path: Path) -> None:
    check_too_few_samples(cli, POINT, tmp_path)
