"""benchmarks/fairness.py and its bare loops (benchmarks/fairness_loops/) measure what dlbench measures: the
same optimizer, warm-up, compile flag, TF32 state, layout and flags."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

from dlbench.backends.paddle import gpu_defaults
from dlbench.cases import get_case
from dlbench.numerics import resolve_precision
from dlbench.spec import preset
from tests.support.paths import REPO

BENCHMARKS = REPO / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "fairness_loops")]
import common as loop_common  # noqa: E402 - benchmarks/fairness_loops/common.py: the bare loops' command line
import fairness  # noqa: E402 - benchmarks/fairness.py


def test_paddle_compile_and_jax_batchnorm_fairness_compares_compiled_points() -> None:
    """benchmarks/fairness.py measures --compile too (Paddle's to_static default against the loop's; the
    SOT converter and flax's fast-variance BatchNorm themselves are checked in the paddle and jax integration
    tests), each side with its framework's default compiler."""
    a = fairness.parser().parse_args(["-f", "paddle,jax", "--compile"])
    for fw in ("paddle", "jax", "torch", "tf"):
        assert loop_common.parse_args(None, fairness.loop_argv(fw, a)).compile
        assert "--compile" in fairness.dlbench_argv(fw, a, Path("s.db"))
    plain = fairness.parser().parse_args(["-f", "paddle"])
    assert not loop_common.parse_args(None, fairness.loop_argv("paddle", plain)).compile
    assert "--compile" not in fairness.dlbench_argv("paddle", plain, Path("s.db"))


def _torch_trainer_optimizer(precision: str) -> torch.optim.Optimizer:
    """The optimizer dlbench's TorchTrainer builds for ResNet-50 at batch 8 on a GPU (CUDA is only a device
    name here: the trainer touches no GPU before a step)."""
    from dlbench.backends.torch.step import TorchTrainer

    model = torch.nn.Linear(4, 4)
    trainer = TorchTrainer(
        get_case("resnet50"), model, iter(()), torch.device("cuda"), resolve_precision(precision, "cuda"), False, 8
    )
    return trainer.optimizer


@pytest.mark.filterwarnings("ignore:.*GradScaler is enabled, but CUDA is not available")
@pytest.mark.parametrize(("device", "precision"), [("cuda", "fp32"), ("cuda", "amp"), ("cpu", "fp32")])
def test_fairness_torch_loop_builds_dlbench_optimizer(device: str, precision: str) -> None:
    import torch_loop  # benchmarks/fairness_loops/torch_loop.py (torch only, no dlbench)

    a = fairness.parser().parse_args(["--device", device, "--precision", precision])
    loop_args = loop_common.parse_args(None, fairness.loop_argv("torch", a))
    loop_opt = torch_loop.make_optimizer(list(torch.nn.Linear(4, 4).parameters()), loop_args.optimizer)
    if device == "cuda":
        ours = _torch_trainer_optimizer(precision)
    else:
        from dlbench.backends.torch.step import make_optimizer

        ours = make_optimizer(get_case("resnet50"), torch.nn.Linear(4, 4), 8, fused=False)
    assert type(loop_opt) is type(ours)
    keys = ("lr", "momentum", "weight_decay", "dampening", "nesterov", "fused", "foreach", "maximize", "differentiable")
    assert {k: loop_opt.defaults.get(k) for k in keys} == {k: ours.defaults.get(k) for k in keys}
    buffers = [s.get("momentum_buffer") for s in loop_opt.state.values()]
    assert buffers and all(b is not None and not b.any() for b in buffers)  # zero before the first step
    for state in ours.state.values():  # dlbench's, where it primes them too (gpu-a's fused-SGD fix)
        assert not state["momentum_buffer"].any()


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_fairness_dlbench_side_warms_up_as_the_loop_does(device: str) -> None:
    a = fairness.parser().parse_args(["--device", device, "--warmup", "4", "--steps", "7"])
    argv = fairness.dlbench_argv("torch", a, Path("s.db"))
    opt = dict(itertools.pairwise(argv))
    proto = (
        preset(opt["--preset"])
        .override(warmup=int(opt["--warmup"]), steps=int(opt["--steps"]), repeats=int(opt["--repeats"]))
        .on(device)
    )
    assert proto.min_time_s == 0  # no calibration window: dlbench warms up exactly as long as the loop
    loop = loop_common.parse_args(None, fairness.loop_argv("torch", a))
    assert (proto.warmup, proto.steps, proto.repeats) == (loop.warmup, loop.steps, 1)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp"])
def test_fairness_paddle_loop_gets_dlbench_tf32_state_layout_and_flags(precision: str) -> None:
    a = fairness.parser().parse_args(["--device", "cuda", "--precision", precision])
    loop = loop_common.parse_args(None, fairness.loop_argv("paddle", a))
    ours = gpu_defaults.plan(
        "cuda", resolve_precision(precision, "cuda"), False, gpu_defaults.has_nhwc(get_case("resnet50"))
    )
    assert loop.flags == ours.flags  # the TF32 switches (off for fp32) and Paddle's benchmark flags
    assert {loop.flags[f] for f in gpu_defaults.TF32_FLAGS} == {precision == "tf32"}
    assert (loop.layout, loop.amp_level) == (ours.layout, ours.amp_level or "O1")


def test_every_framework_has_a_bare_loop() -> None:
    """A canonical loop per built-in framework, and fairness.py runs every one of them by default (#45)."""
    from dlbench.backends import all_backends

    assert set(fairness.FRAMEWORKS) == set(all_backends())
    for fw in fairness.FRAMEWORKS:
        loop = fairness.LOOPS / f"{fw}_loop.py"
        assert loop.is_file(), loop
        text = loop.read_text()
        assert "import dlbench" not in text and "from dlbench" not in text  # bare: the framework's own code only
        assert "measure(" in text  # dlbench's one throughput definition (common.py)


def test_startup_floor_is_torchvision_alexnet_with_dlbench_count() -> None:
    """benchmarks/startup.py's bare side for torch AlexNet (the floor no harness goes below) trains torchvision's
    AlexNet: the loop's fallback code has AlexNet's published count, as dlbench's own model; loops that build only
    ResNet-50 refuse another model instead of training ResNet-50 under its name."""
    import torch_loop

    model = torch_loop.AlexNet()
    assert sum(p.numel() for p in model.parameters()) == 61_100_840  # torchvision.models.alexnet's published count
    assert loop_common.parse_args(None, ["--model", "alexnet"], models=("resnet50", "alexnet")).model == "alexnet"
    with pytest.raises(SystemExit):
        loop_common.parse_args(None, ["--model", "alexnet"])
    out = model(torch.zeros(1, 3, 64, 64))
    assert out.shape == (1, 1000)
