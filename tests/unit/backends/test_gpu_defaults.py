"""GPU defaults set by the backends, checked on the CPU against fake builds: Paddle's flags (those of its own
ResNet-50 benchmark, inert on the CPU, refused where a CUDA build lacks the TF32 flags) and MegEngine's TF32."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping

import pytest

from dlbench.backends.base import Unsupported
from dlbench.backends.megengine import tf32 as mge_tf32
from dlbench.backends.paddle import gpu_defaults
from dlbench.cases import get_case
from dlbench.numerics import resolve_precision
from dlbench.suite import load as load_suite
from dlbench.suite.expand import expand

FlagValue = bool | int


class FakePaddleFlags:
    """paddle.get_flags / paddle.set_flags of a build: the flags it was compiled with; any other flag raises the
    ValueError paddle raises for a flag the build lacks."""

    def __init__(self, flags: Mapping[str, FlagValue]) -> None:
        self.flags = dict(flags)
        self.set_calls: list[dict[str, FlagValue]] = []

    def get_flags(self, names: list[str]) -> dict[str, FlagValue]:
        for n in names:
            if n not in self.flags:
                raise ValueError(f"Flag {n} cannot get its value through this function.")
        return {n: self.flags[n] for n in names}

    def set_flags(self, values: dict[str, FlagValue]) -> None:
        self.get_flags(list(values))
        self.set_calls.append(dict(values))
        self.flags.update(values)


# A CUDA build of paddle 3.x as it starts: TF32 on for cuBLAS (its default), the benchmark flags at theirs.
CUDA_BUILD = {
    "FLAGS_allow_tf32_cublas": True,
    "FLAGS_allow_tf32_cudnn": True,
    "FLAGS_cudnn_exhaustive_search": False,
    "FLAGS_conv_workspace_size_limit": 512,
    "FLAGS_cudnn_batchnorm_spatial_persistent": False,
    "FLAGS_max_inplace_grad_add": 0,
}


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp", "bf16"])
def test_paddle_gpu_defaults_are_those_of_paddles_resnet50_benchmark(precision: str) -> None:
    numerics = resolve_precision(precision, "cuda")
    plan = gpu_defaults.plan("cuda", numerics, channels_last=False, nhwc_model=True)
    assert plan.flags["FLAGS_cudnn_exhaustive_search"] is True
    assert plan.flags["FLAGS_conv_workspace_size_limit"] == 4000
    assert plan.flags["FLAGS_cudnn_batchnorm_spatial_persistent"] is True
    assert {plan.flags[f] for f in gpu_defaults.TF32_FLAGS} == {precision == "tf32"}
    assert (plan.layout, plan.amp_level, plan.master_weights) == {
        "amp": ("NHWC", "O2", True),
        "bf16": ("NCHW", "O1", False),
    }.get(precision, ("NCHW", None, False))
    # what the backend applies on a CUDA build (paddle's flag functions mocked): set, read back, recorded
    build = FakePaddleFlags(CUDA_BUILD)
    applied = gpu_defaults.apply_flags(plan.flags, build.set_flags, build.get_flags)
    assert applied == plan.flags and build.flags == {**CUDA_BUILD, **plan.flags}
    assert gpu_defaults.flag_facts(applied)["cudnn_exhaustive_search"] == "True"
    assert plan.facts()["paddle_amp_level"] == (plan.amp_level or "none")
    # a model without an NHWC form keeps NCHW, and --channels-last on it is refused in one line
    assert gpu_defaults.plan("cuda", numerics, False, nhwc_model=False).layout == "NCHW"
    with pytest.raises(Unsupported, match="NCHW only"):
        gpu_defaults.plan("cuda", numerics, channels_last=True, nhwc_model=False)


def test_paddle_gpu_defaults_are_inert_on_the_cpu_and_the_paddle_suite_uses_them() -> None:
    cpu = gpu_defaults.plan("cpu", resolve_precision("fp32", "cpu"), channels_last=False, nhwc_model=True)
    assert cpu.flags == {} and cpu.layout == "NCHW"
    cpu_build = FakePaddleFlags({"FLAGS_max_inplace_grad_add": 0})  # a CPU build: no cuDNN or TF32 flag
    assert gpu_defaults.apply_flags(cpu.flags, cpu_build.set_flags, cpu_build.get_flags) == {}
    assert cpu_build.set_calls == []
    suite = load_suite("paddle")
    suite = suite.model_copy(update={"axes": suite.axes.model_copy(update={"framework": ["paddle"]})})
    points = [p.spec for p in expand(suite, "cuda", data_dir="/data")]
    assert {s.precision for s in points} == {"fp32", "amp"}
    for s in points:
        plan = gpu_defaults.plan(
            s.device,
            resolve_precision(s.precision, s.device),
            s.channels_last,
            gpu_defaults.has_nhwc(get_case(s.model)),
        )
        assert plan.flags["FLAGS_cudnn_exhaustive_search"] is True
        assert (plan.layout, plan.amp_level) == (("NHWC", "O2") if s.precision == "amp" else ("NCHW", None))


def test_paddle_cuda_build_without_tf32_flags_refuses_fp32() -> None:
    fp32 = resolve_precision("fp32", "cuda")
    plan = gpu_defaults.plan("cuda", fp32, False, True)
    old = FakePaddleFlags({k: v for k, v in CUDA_BUILD.items() if k not in gpu_defaults.TF32_FLAGS})
    with pytest.raises(
        Unsupported, match="lacks FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn: it cannot guarantee IEEE fp32"
    ):
        gpu_defaults.apply_flags(plan.flags, old.set_flags, old.get_flags)
    assert "IEEE fp32" in str(gpu_defaults.tf32_missing([], allow_tf32=False))  # refuse() says it before a build
    assert "lacks FLAGS_allow_tf32_cudnn:" in str(gpu_defaults.tf32_missing(["FLAGS_allow_tf32_cublas"], False))
    assert gpu_defaults.tf32_missing(gpu_defaults.TF32_FLAGS, False) is None  # on before the build: it sets them
    stuck = FakePaddleFlags(CUDA_BUILD)
    stuck.set_flags = lambda values: None  # type: ignore[method-assign]  # a build that ignores the switch
    with pytest.raises(Unsupported, match="paddle kept FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn on"):
        gpu_defaults.apply_flags(plan.flags, stuck.set_flags, stuck.get_flags)
    assert gpu_defaults.tf32_problem({"FLAGS_allow_tf32_cublas": False, "FLAGS_allow_tf32_cudnn": False}, False) is None


def test_megengine_turns_tf32_off_on_the_gpu_or_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mge_tf32.TF32_OVERRIDE_VAR, "1")
    package = importlib.reload(importlib.import_module("dlbench.backends.megengine"))  # imports no megengine
    assert "megengine" not in sys.modules
    assert os.environ[mge_tf32.TF32_OVERRIDE_VAR] == "0" and package.__doc__
    assert mge_tf32.fp32_problem("cuda", mge_tf32.override_state(os.environ)) is None
    assert mge_tf32.tf32_in_use("cuda", "0") is False
    for state in ("1", "unset"):
        assert mge_tf32.tf32_in_use("cuda", state)
        assert f"NVIDIA_TF32_OVERRIDE is {state!r}" in str(mge_tf32.fp32_problem("cuda", state))
