"""The frameworks that share one set of checks, as one table: exact parameter counts, convergence, a compiled
point through the CLI, refusals with their reasons, real data, and a real-data folder too small for a batch.

Each check runs `python -m dlbench.check ...` (or a worker) with the framework environment's interpreter (the
`framework_python` fixture), so this file never imports a framework. Without an environment its rows skip,
naming it (`dlbench setup NAME`). What only one framework has (a refusal of several CPU processes, two DDP
ranks, a hybridized BERT) is a test of its own below, parametrized over that framework alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dlbench.store.store import Store
from tests.support.frameworks import (
    MATRIX_ONLY,
    assert_compiled_point,
    assert_param_counts,
    check_loss_falls,
    refused_up_front,
    run_check,
)
from tests.support.real_data import IMAGE_AND_BERT, check_real_points, check_too_few_samples, make_real_data
from tests.support.scaling import assert_ranks_in_sync, stored

pytestmark = [pytest.mark.slow]
CliResult = tuple[int, str, str]
Sizes = dict[str, tuple[int, int]]  # case -> (input size, batch)
RealRuns = tuple[tuple[str, str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Framework:
    """One row: what a framework's checks differ in."""

    name: str
    version: str  # the start of the framework's version string
    # (input size, batch) per case: near the smallest input each architecture accepts in that framework
    tiny: Sizes
    compiled: str  # the label of a compiled point (extra["compiled"])
    compiled_points: tuple[tuple[str, str], ...] = (("resnet50", "32"),)  # (case, input size)
    compile_flag: bool = True  # False: the framework always compiles (no --compile)
    matrix: bool = False  # the heaviest convergence cases only under `pytest -m matrix`
    timeout_s: dict[str, float] = field(default_factory=dict)  # convergence timeouts over the default 900 s
    loader: str = ""  # the real-data loader's label
    real_runs: RealRuns = IMAGE_AND_BERT

    @property
    def point(self) -> tuple[str, ...]:
        """The smallest measured point on the command line."""
        return ("-f", self.name, "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")


# AlexNet's two p=0.5 dropouts make the loss of a memorised 2-image batch jump around (6.8 -> 0.3 -> 9.1 seen),
# so it trains on 8 images everywhere; BERT runs 16 tokens; AlexNet's three 3/2 max-pools need 64, Inception v3 75.
FRAMEWORKS = {
    f.name: f
    for f in (
        # Jittor's pooling layers demand an input larger than the kernel, padding aside: AlexNet needs 79, VGG-16 64
        # and Inception v3 171 (its last 3x3 average pools need a 4x4 grid). Jittor compiles its kernels on first use
        # and caches them on disk: a fresh machine pays minutes once. Its own CPU kernels (MKL off) are slow: on the
        # shared 2-core machine 20 steps of inception_v3 and bert_base took over the default 900 s.
        Framework(
            "jittor",
            "1.3",
            {
                "resnet50": (32, 2),
                "resnet152": (32, 2),
                "vgg16": (64, 2),
                "alexnet": (80, 8),
                "inception_v3": (171, 1),
                "bert_base": (16, 2),
            },
            "jit (always)",
            compile_flag=False,
            timeout_s={"inception_v3": 2400.0, "bert_base": 2400.0},
            loader="jittor.dataset, 2 worker processes",
        ),
        # MegEngine (Python 3.8-3.10): the ResNets train at 64: at 32 their last batch norms see 1x1 maps of 2 images,
        # and MegEngine's loss then jumped (9.5 -> 32 -> 0) where it falls smoothly at 64.
        Framework(
            "megengine",
            "1.13.0",
            {
                "resnet50": (64, 2),
                "resnet152": (64, 2),
                "vgg16": (32, 2),
                "alexnet": (64, 8),
                "inception_v3": (75, 2),
                "bert_base": (16, 2),
            },
            "megengine.jit.trace(symbolic=True)",
            compiled_points=(("resnet50", "64"), ("bert_base", "16")),
            matrix=True,
            loader="megengine DataLoader, 2 worker processes",
            real_runs=(("resnet50", "64", ()), ("bert_base", "16", ())),
        ),
        # MindSpore: convergence runs PyNative; the CLI point runs the ms.jit graph. VGG-16's two dropouts jump on 2
        # images too (6.88 -> 0.47 -> 11.17 -> 0.31 seen in one run, 9.28 at step 20 in another).
        Framework(
            "mindspore",
            "2.",
            {
                "resnet50": (32, 2),
                "resnet152": (32, 2),
                "vgg16": (32, 8),
                "alexnet": (64, 8),
                "inception_v3": (75, 2),
                "bert_base": (16, 2),
            },
            "ms.jit (graph mode)",
            loader="mindspore.dataset",
            # ResNet-50 in graph mode (a new batch every step into one compiled graph), BERT in PyNative.
            real_runs=(("resnet50", "32", ("--compile",)), ("bert_base", "16", ())),
        ),
        # MXNet (Gluon).
        Framework(
            "mxnet",
            "1.9.1",
            {
                "resnet50": (32, 2),
                "resnet152": (32, 2),
                "vgg16": (32, 2),
                "alexnet": (64, 8),
                "inception_v3": (75, 2),
                "bert_base": (16, 2),
            },
            "hybridize(static_alloc, static_shape)",
            loader="gluon DataLoader, 2 worker processes",
        ),
        # OneFlow (Python 3.8-3.10): the ResNets train at 64: at 32 their last batch norms see 1x1 maps of 2 images,
        # and OneFlow's loss, once memorised (0.08 by step 6), went to NaN.
        Framework(
            "oneflow",
            "0.9.0",
            {
                "resnet50": (64, 2),
                "resnet152": (64, 2),
                "vgg16": (32, 2),
                "alexnet": (64, 8),
                "inception_v3": (75, 2),
                "bert_base": (16, 2),
            },
            "oneflow.nn.Graph",
            compiled_points=(("resnet50", "32"), ("bert_base", "16")),
            matrix=True,
            loader="oneflow DataLoader, 2 workers",
        ),
    )
}
# PyTorch has convergence sanity as every other backend has it (its other checks: test_torch_*.py).
TORCH_TINY: Sizes = {
    "resnet50": (32, 2),
    "resnet152": (32, 2),
    "vgg16": (32, 2),
    "alexnet": (64, 8),
    "inception_v3": (75, 2),
    "bert_base": (16, 2),
}

# Points refused through the CLI from the framework's capability table, before anything runs (exit 2, one line,
# nothing stored): (framework, input size, the options that ask for it, a piece of the reason).
CLI_REFUSALS = [
    ("jittor", "32", ("--compile",), "always JIT-compiles"),
    ("megengine", "64", ("--precision", "bf16"), "fp32 only"),
    ("mindspore", "32", ("--channels-last",), "NCHW only"),
    ("mxnet", "32", ("--channels-last",), "NCHW only"),
    ("oneflow", "32", ("--precision", "bf16"), "fp32 only"),
]
# Precisions refused by `dlbench.check converge` on the CPU: (framework, precision, a piece of the reason).
CHECK_REFUSALS = [
    ("jittor", "amp", "for GPUs"),
    ("jittor", "bf16", "fp32 only"),
    ("jittor", "tf32", "NVIDIA GPUs"),
    ("mindspore", "amp", "for GPUs"),
    ("mindspore", "bf16", "no bf16"),
    ("mindspore", "tf32", "NVIDIA GPUs"),
    ("mxnet", "bf16", "no oneDNN bf16 kernels on this CPU"),
]


def _row(name: str, *rest: Any) -> Any:
    """A pytest param of the table: the framework's name (for the `framework_python` fixture), then `rest`,
    marked with the framework and named after it and what it asks for (`rest`'s second-to-last item)."""
    asked = rest[-2] if isinstance(rest[-2], str) else "-".join(o.lstrip("-") for o in rest[-2])
    return pytest.param(name, *rest, marks=pytest.mark.framework(name), id=f"{name}-{asked}")


def _rows(*names: str) -> list[Any]:
    """The rows of these frameworks (every framework of the table by default), each with its Framework."""
    return [pytest.param(n, FRAMEWORKS[n], marks=pytest.mark.framework(n), id=n) for n in names or FRAMEWORKS]


def _convergence_rows() -> list[Any]:
    """(framework, case, input size, batch, timeout) for every framework and case, the heaviest cases marked
    `matrix` where the framework's row says so."""
    rows = []
    tables: list[tuple[str, Sizes, bool, dict[str, float]]] = [
        (f.name, f.tiny, f.matrix, f.timeout_s) for f in FRAMEWORKS.values()
    ]
    tables.append(("torch", TORCH_TINY, True, {}))
    for name, tiny, matrix, timeouts in tables:
        for model in tiny:
            marks = [pytest.mark.framework(name), *([pytest.mark.matrix] if matrix and model in MATRIX_ONLY else [])]
            if model in timeouts:  # past the default per-test timeout (pyproject.toml): the check's own, and more
                marks.append(pytest.mark.timeout(timeouts[model] + 300))
            size, batch = tiny[model]
            rows.append(
                pytest.param(name, model, size, batch, timeouts.get(model, 900.0), marks=marks, id=f"{name}-{model}")
            )
    return rows


FW = ("framework_python", "fw")


@pytest.mark.parametrize(FW, _rows(), indirect=["framework_python"])
def test_parameter_counts_of_all_cases(framework_python: str, fw: Framework) -> None:
    assert_param_counts(framework_python, fw.name, fw.version, fw.tiny)  # the six built here exactly


@pytest.mark.parametrize(
    ("framework_python", "model", "size", "batch", "timeout"), _convergence_rows(), indirect=["framework_python"]
)
def test_loss_falls_in_20_steps(
    framework_python: str, model: str, size: int, batch: int, timeout: float, request: pytest.FixtureRequest
) -> None:
    framework = request.node.get_closest_marker("framework").args[0]
    check_loss_falls(framework_python, framework, model, size, batch, timeout=timeout)


@pytest.mark.parametrize(
    ("framework_python", "fw", "model", "size"),
    [
        pytest.param(f.name, f, m, s, marks=pytest.mark.framework(f.name), id=f"{f.name}-{m}")
        for f in FRAMEWORKS.values()
        for m, s in f.compiled_points
    ],
    indirect=["framework_python"],
)
def test_one_compiled_point_through_the_cli(
    framework_python: str, fw: Framework, model: str, size: str, cli: Callable[..., CliResult], store_path: Path
) -> None:
    assert_compiled_point(
        cli, store_path, fw.point, model, size, fw.name, fw.version, fw.compiled, flag=fw.compile_flag
    )


@pytest.mark.parametrize(
    ("framework_python", "size", "options", "reason"), [_row(*r) for r in CLI_REFUSALS], indirect=["framework_python"]
)
def test_refused_points_say_why(
    framework_python: str,
    size: str,
    options: tuple[str, ...],
    reason: str,
    cli: Callable[..., CliResult],
    store_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Refused from the framework's capability table before anything runs: exit 2, one line, nothing stored."""
    fw = FRAMEWORKS[request.node.get_closest_marker("framework").args[0]]
    refused_up_front(cli, store_path, (*fw.point, "-m", "resnet50", "--input-size", size, *options), reason)


@pytest.mark.parametrize(
    ("framework_python", "precision", "reason"), [_row(*r) for r in CHECK_REFUSALS], indirect=["framework_python"]
)
def test_reduced_precisions_are_refused_on_the_cpu(
    framework_python: str, precision: str, reason: str, request: pytest.FixtureRequest
) -> None:
    name = request.node.get_closest_marker("framework").args[0]
    answer = run_check(
        framework_python,
        "converge",
        name,
        "resnet50",
        "--steps",
        "2",
        "--batch",
        "2",
        "--input-size",
        "32",
        "--precision",
        precision,
    )
    if name == "mxnet" and "losses" in answer:
        pytest.skip("this CPU has oneDNN bf16 kernels: MXNet's bf16 AMP runs, so there is nothing to refuse")
    assert reason in str(answer.get("unsupported")), answer


@pytest.mark.parametrize(FW, _rows(), indirect=["framework_python"])
def test_real_data_through_the_frameworks_loader(
    framework_python: str, fw: Framework, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    check_real_points(cli, fw.point, make_real_data(tmp_path), fw.loader, runs=fw.real_runs)


@pytest.mark.parametrize(FW, _rows(), indirect=["framework_python"])
def test_real_data_with_fewer_samples_than_a_batch_is_an_error(
    framework_python: str, fw: Framework, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    check_too_few_samples(cli, fw.point, tmp_path)


# -- what one framework of the table has alone ----------------------------------------------------------------


@pytest.mark.parametrize(FW, _rows("megengine"), indirect=["framework_python"])
def test_several_cpu_processes_are_refused_in_one_line(
    framework_python: str, fw: Framework, cli: Callable[..., CliResult], store_path: Path
) -> None:
    args = (*fw.point, "-m", "resnet50", "--input-size", "64", "--devices-per-node", "2", "--threads", "1")
    refused_up_front(cli, store_path, args, "no CPU collective backend")


@pytest.mark.parametrize(FW, _rows("mxnet"), indirect=["framework_python"])
def test_hybridized_bert_trains(
    framework_python: str, fw: Framework, cli: Callable[..., CliResult], store_path: Path
) -> None:
    code, _, err = cli(
        "run", *fw.point, "-m", "bert_base", "--input-size", "16", "--compile", "--store", str(store_path)
    )
    assert code == 0, err
    [p] = [s.result for s in Store(store_path).points()]
    assert p.status == "ok" and p.metrics is not None and math.isfinite(p.metrics.final_loss or math.nan), p.error


@pytest.mark.parametrize(FW, _rows("oneflow"), indirect=["framework_python"])
def test_two_ddp_ranks_on_the_cpu_stay_in_sync(
    framework_python: str, fw: Framework, cli: Callable[..., CliResult], store_path: Path
) -> None:
    # At 32 pixels the last stage's batch norm sees 1x1 maps of 2 images; OneFlow 0.9's DDP then went to NaN on
    # the second step (one process does not). At 64 (2x2 maps) the ranks train and stay in sync.
    code, _, err = cli(
        "run",
        *fw.point,
        "-m",
        "resnet50",
        "--input-size",
        "64",
        "--devices-per-node",
        "2",
        "--threads",
        "1",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    r = stored(store_path)[-1]
    assert r.spec.world_size == 2
    assert_ranks_in_sync(r, 2)  # status ok, both ranks' samples, one checksum, global batch 2 x 2
    assert r.env.descriptive["strategy_run"] == "ddp"
