"""What the paddle backend sets on a GPU, decided without importing paddle (so the decisions are unit-tested).

Paddle's own ResNet-50 v1.5 report (seed 001; PaddlePaddle/Perf ResNet50V1.5/scripts/clas_fp32.sh and
clas_fp16.sh, over PaddleClas) trains with these flags exported, fp32 and AMP alike: cuDNN's exhaustive
algorithm search (torch's ``cudnn.benchmark``, XLA's autotuning), a 4000 MB convolution workspace, cuDNN's
persistent spatial batch norm and in-place gradient accumulation up to 8 grads. Its AMP run is O2 (pure fp16
with fp32 master weights, ``ResNet50_amp_O2_ultra.yaml``: ``level: O2``, Momentum ``multi_precision: True``)
in NHWC; its fp32 run is NCHW (``ResNet50.yaml``). Not taken over: its memory flags
(``FLAGS_fraction_of_gpu_memory_to_use=0.8``, ``FLAGS_eager_delete_tensor_gb``), which would cap what a point
may use and blur its peak, and the 4-channel padded input of the O2 config, which changes the case's first
convolution.

A CPU build has none of the cuDNN flags (``paddle.set_flags`` refuses them), so on the CPU nothing is set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from dlbench.backends.base import Unsupported
from dlbench.cases import Case
from dlbench.cases.arch import ResNetArch
from dlbench.numerics import Numerics

FlagValue = bool | int
GetFlags = Callable[[list[str]], Mapping[str, FlagValue]]
SetFlags = Callable[[dict[str, FlagValue]], None]

# paddle's TF32 switches: cuBLAS matmuls and cuDNN convolutions (CUDA builds only; a CPU build has neither).
TF32_FLAGS: tuple[str, ...] = ("FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn")
# The flags Paddle's ResNet-50 report exports on its GPUs (the speed ones; see the module's docstring).
BENCHMARK_FLAGS: dict[str, FlagValue] = {
    "FLAGS_cudnn_exhaustive_search": True,
    "FLAGS_conv_workspace_size_limit": 4000,
    "FLAGS_cudnn_batchnorm_spatial_persistent": True,
    "FLAGS_max_inplace_grad_add": 8,
}
BENCHMARK_SOURCE = "PaddlePaddle/Perf ResNet50V1.5 scripts (clas_fp32.sh, clas_fp16.sh)"
Layout = Literal["NCHW", "NHWC"]
AmpLevel = Literal["O1", "O2"]


@dataclass(frozen=True)
class GpuPlan:
    """The settings a point trains with: paddle flags, data layout, autocast level and master weights."""

    flags: dict[str, FlagValue] = field(default_factory=dict)
    layout: Layout = "NCHW"
    amp_level: AmpLevel | None = None
    master_weights: bool = False

    def facts(self) -> dict[str, str]:
        """The plan as the point's facts (and environment): what was asked, before paddle reads it back."""
        return {
            "paddle_layout": self.layout,
            "paddle_amp_level": self.amp_level or "none",
            "paddle_master_weights": str(self.master_weights),
        }


def has_nhwc(case: Case) -> bool:
    """Whether the case's paddle model has an NHWC form (models.to_nhwc): the ResNets, whose global average pool
    before the head and lack of channel concatenation make the same weights compute the same function."""
    return isinstance(case.arch, ResNetArch)


def plan(device: str, numerics: Numerics, channels_last: bool, nhwc_model: bool) -> GpuPlan:
    """Paddle's own benchmark settings on a GPU, for a precision: its flags and TF32 switches; amp as O2 with
    master weights in NHWC (where the model has an NHWC form); --channels-last asks NHWC on any device. On the
    CPU nothing but the layout asked for (the cuDNN flags do not exist there)."""
    if channels_last and not nhwc_model:
        raise Unsupported(
            "paddle builds this model NCHW only (NHWC needs a global pool before the head and no "
            "channel concatenation: the ResNets); drop --channels-last"
        )
    if device != "cuda":
        cpu_level: AmpLevel | None = "O1" if numerics.autocast else None
        return GpuPlan({}, "NHWC" if channels_last else "NCHW", cpu_level, False)
    o2 = numerics.loss_scaling  # amp: Paddle's report ran pure fp16 (O2) with fp32 master weights
    flags: dict[str, FlagValue] = {**BENCHMARK_FLAGS, **dict.fromkeys(TF32_FLAGS, numerics.allow_tf32)}
    layout: Layout = "NHWC" if channels_last or (o2 and nhwc_model) else "NCHW"
    level: AmpLevel | None = ("O2" if o2 else "O1") if numerics.autocast else None
    return GpuPlan(flags, layout, level, master_weights=o2)


def tf32_missing(have: Iterable[str], allow_tf32: bool) -> str | None:
    """Why a build with these TF32 flags cannot honour the precision's TF32 setting (None: it has them all);
    a CUDA build without them would run fp32 as TF32 unseen."""
    missing = sorted(set(TF32_FLAGS) - set(have))
    if not missing:
        return None
    wanted = "--precision tf32" if allow_tf32 else "IEEE fp32 (its cuBLAS/cuDNN would use TF32 on Ampere and later)"
    return f"this paddle build lacks {', '.join(missing)}: it cannot guarantee {wanted}"


def tf32_problem(present: Mapping[str, bool], allow_tf32: bool) -> str | None:
    """Why a build cannot honour the precision's TF32 setting, from its TF32 flags as read back after setting
    them (None: it does)."""
    missing = tf32_missing(present, allow_tf32)
    if missing:
        return missing
    wrong = sorted(flag for flag, on in present.items() if flag in TF32_FLAGS and on != allow_tf32)
    if wrong:
        return f"paddle kept {', '.join(wrong)} {'off' if allow_tf32 else 'on'}; --precision cannot be honoured"
    return None


def read_flags(names: list[str], get_flags: GetFlags) -> dict[str, FlagValue]:
    """The flags of `names` this build has, read back (a flag it lacks raises ValueError in paddle: skipped)."""
    out: dict[str, FlagValue] = {}
    for name in names:
        try:
            out[name] = get_flags([name])[name]
        except ValueError:  # "Flag ... cannot get its value through this function": not compiled into this build
            continue
    return out


def apply_flags(wanted: Mapping[str, FlagValue], set_flags: SetFlags, get_flags: GetFlags) -> dict[str, FlagValue]:
    """Set the plan's flags and return them read back; a flag this build lacks, or one that reads back otherwise,
    raises Unsupported naming it (the TF32 ones in tf32_problem's words)."""
    names = list(wanted)
    have = read_flags(names, get_flags)
    if have:
        set_flags({k: wanted[k] for k in have})
        have = read_flags(names, get_flags)
    tf32 = {k: bool(v) for k, v in have.items() if k in TF32_FLAGS}
    if any(k in TF32_FLAGS for k in wanted):
        problem = tf32_problem(tf32, bool(wanted[TF32_FLAGS[0]]))
        if problem:
            raise Unsupported(problem)
    lacking = [k for k in names if k not in have]
    wrong = [k for k in have if k not in TF32_FLAGS and have[k] != wanted[k]]
    if lacking or wrong:
        raise Unsupported(
            f"this paddle build {'lacks ' + ', '.join(lacking) if lacking else 'kept ' + ', '.join(wrong)}"
            f" of Paddle's benchmark settings ({BENCHMARK_SOURCE})"
        )
    return have


def flag_facts(flags: Mapping[str, FlagValue]) -> dict[str, str]:
    """Flags read back, as facts and environment keys ('cudnn_exhaustive_search': 'True')."""
    return {k.removeprefix("FLAGS_"): str(v) for k, v in flags.items()}


__all__ = [
    "BENCHMARK_FLAGS",
    "BENCHMARK_SOURCE",
    "TF32_FLAGS",
    "GpuPlan",
    "apply_flags",
    "flag_facts",
    "has_nhwc",
    "plan",
    "read_flags",
    "tf32_missing",
    "tf32_problem",
]
