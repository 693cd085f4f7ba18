"""Jittor in its own environment: exact parameter counts, convergence, one real point, refusals.

Each check runs `python -m dlbench.check ...` (or a worker) with the jittor environment's interpreter, so
this file never imports jittor. Without that environment every test skips, naming it (`dlbench setup jittor`).
Jittor compiles its kernels on first use and caches them on disk: a fresh machine pays minutes once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import check_loss_falls, framework_python, run_check
from fw_helpers import assert_compiled_point, assert_param_counts
from real_helpers import check_real_points, check_too_few_samples, make_real_data

from dlbench.store.store import Store

pytestmark = [pytest.mark.framework("jittor"), pytest.mark.slow]
CliResult = tuple[int, str, str]
POINT = ("-f", "jittor", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")

# (input size, batch): near the smallest input each architecture accepts in Jittor, whose pooling layers
# demand an input larger than the kernel, padding aside: AlexNet needs 79, VGG-16 64 and Inception v3 171
# (its last 3x3 average pools need a 4x4 grid); BERT runs 16 tokens. AlexNet's two p=0.5 dropouts make the
# loss of a memorised 2-image batch jump around, so it trains on 8 images.
TINY = {"resnet50": (32, 2), "resnet152": (32, 2), "vgg16": (64, 2), "alexnet": (80, 8),
        "inception_v3": (171, 1), "bert_base": (16, 2)}
# Jittor's own CPU kernels (MKL off) are slow: on the shared 2-core machine 20 steps of these two took over
# the default 900 s.
TIMEOUT_S = {"inception_v3": 2400.0, "bert_base": 2400.0}


@pytest.fixture(scope="module")
def jt_python() -> str:
    """The jittor environment's interpreter, or a skip naming it."""
    return framework_python("jittor")


def test_parameter_counts_of_all_cases(jt_python: str) -> None:
    assert_param_counts(jt_python, "jittor", "1.3", TINY)  # the six built here exactly


@pytest.mark.parametrize("model", list(TINY))
def test_loss_falls_in_20_steps(jt_python: str, model: str) -> None:
    check_loss_falls(jt_python, "jittor", model, *TINY[model], timeout=TIMEOUT_S.get(model, 900.0))


def test_one_point_through_the_cli(jt_python: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    assert_compiled_point(cli, store_path, POINT, "resnet50", "32", "jittor", "1.3", "jit (always)", flag=False)


def test_compile_is_refused_because_jittor_always_compiles(jt_python: str, cli: Callable[..., CliResult],
                                                           store_path: Path) -> None:
    code, _, _ = cli("run", *POINT, "-m", "resnet50", "--input-size", "32", "--compile", "--store", str(store_path))
    [p] = [s.result for s in Store(store_path).points()]
    assert code == 0 and p.status == "unsupported"  # a refused point is not a failure (exit 0)
    assert "always JIT-compiles" in (p.error or "")


@pytest.mark.parametrize(("precision", "reason"), [("amp", "for GPUs"), ("bf16", "fp32 only"), ("tf32", "NVIDIA GPUs")])
def test_reduced_precisions_are_refused_on_the_cpu(jt_python: str, precision: str, reason: str) -> None:
    answer = run_check(jt_python, "converge", "jittor", "resnet50", "--steps", "2", "--batch", "2",
                       "--input-size", "32", "--precision", precision)
    assert reason in str(answer.get("unsupported")), answer


def test_real_data_through_jittor_dataset(jt_python: str, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    check_real_points(cli, POINT, make_real_data(tmp_path), "jittor.dataset, 2 worker processes")


def test_real_data_with_fewer_samples_than_a_batch_is_an_error(jt_python: str, cli: Callable[..., CliResult],
                                                               tmp_path: Path) -> None:
    check_too_few_samples(cli, POINT, tmp_path)
