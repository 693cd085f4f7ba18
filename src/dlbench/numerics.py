"""One numerics policy for every backend: what `--precision` means, framework-free.

| precision | storage | matmul and convolution math                  | loss scaling | devices |
|-----------|---------|-----------------------------------------------|--------------|---------|
| fp32      | float32 | IEEE float32 (TF32 turned off where it is on) | no           | any     |
| tf32      | float32 | TF32 tensor cores (10-bit mantissa inputs)    | no           | NVIDIA GPUs (Ampere and later) |
| amp       | float32 | float16 autocast                              | dynamic      | NVIDIA GPUs |
| bf16      | float32 | bfloat16 autocast                             | no           | GPUs and CPUs with bf16 kernels |
| fp8       | float32 | float8 (e4m3/e5m2) linear layers, the rest bfloat16 autocast | no | GPUs with FP8 tensor cores (sm_89+) |

Each backend asks `resolve_precision` what to do, applies it, reads the framework's settings back and reports
the *effective* math mode (`math_mode`, an identity key of the point), so that two frameworks are compared only
on the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ComputeDtype = Literal["float32", "float16", "bfloat16"]

# The initial loss scale of dynamic loss scaling (torch's GradScaler, in dlbench and the bare fairness loop alike):
# torch's default, 2^16, overflowed fp16 ResNet-50's first 6 steps on this project's CPU, each step skipped, so a
# short warm-up timed skipped steps; at 2^10 the first step updates the weights, and the scaler still grows it.
LOSS_SCALE_INIT = 2.0**10

# The math-mode labels a backend may report.
MATH_MODES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
FP8_NO_CORES = (
    "fp8 needs FP8 tensor cores (NVIDIA sm_89 and later: Ada, Hopper, Blackwell), and {where} has "
    "none: use --precision bf16"
)


@dataclass(frozen=True)
class Numerics:
    """What a precision means on a device: the compute dtype, whether TF32 may be used, loss scaling."""

    precision: str
    compute_dtype: ComputeDtype
    allow_tf32: bool
    loss_scaling: bool
    math_mode: str
    refusal: str | None = None

    @property
    def autocast(self) -> bool:
        """Whether the forward pass runs under a lower-precision autocast."""
        return self.compute_dtype != "float32"


def resolve_precision(precision: str, device: str) -> Numerics:
    """The numerics of a precision on a device ('cpu' or 'cuda'); `refusal` says why it cannot run there."""
    if precision == "fp32":
        return Numerics("fp32", "float32", allow_tf32=False, loss_scaling=False, math_mode="fp32")
    if precision == "tf32":
        refusal = (
            None
            if device == "cuda"
            else "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere and later): use --precision fp32 on the CPU"
        )
        return Numerics("tf32", "float32", allow_tf32=True, loss_scaling=False, math_mode="tf32", refusal=refusal)
    if precision == "amp":
        refusal = (
            None
            if device == "cuda"
            else "amp is float16 with loss scaling, for GPUs: use --precision bf16 for reduced precision on the CPU"
        )
        return Numerics("amp", "float16", allow_tf32=False, loss_scaling=True, math_mode="fp16", refusal=refusal)
    if precision == "bf16":
        return Numerics("bf16", "bfloat16", allow_tf32=False, loss_scaling=False, math_mode="bf16")
    if precision == "fp8":  # a GPU's compute capability is checked by the backend that reads it
        refusal = None if device == "cuda" else FP8_NO_CORES.format(where="the CPU")
        return Numerics("fp8", "bfloat16", allow_tf32=False, loss_scaling=False, math_mode="fp8", refusal=refusal)
    raise ValueError(f"unknown precision {precision!r}")


def describe(numerics: Numerics, tf32_in_use: bool | None = None) -> str:
    """The effective math mode label: fp32 reads 'tf32' when the framework was found using TF32 anyway."""
    if numerics.math_mode == "fp32" and tf32_in_use:
        return "tf32"
    return numerics.math_mode


__all__ = ["FP8_NO_CORES", "MATH_MODES", "Numerics", "describe", "resolve_precision"]
