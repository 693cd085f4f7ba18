"""MegEngine's TF32 state on a GPU, decided without importing megengine (unit-tested on any machine).

cuBLAS and cuDNN read ``NVIDIA_TF32_OVERRIDE`` when they load: "0" keeps every FP32 matmul and convolution
in IEEE FP32, whatever the framework asks. MegEngine itself never turns TF32 off, so that variable is the only
guarantee of dlbench's fp32 there.
"""

from __future__ import annotations

from collections.abc import Mapping

TF32_OVERRIDE_VAR = "NVIDIA_TF32_OVERRIDE"


def override_state(environ: Mapping[str, str]) -> str:
    """The TF32 override in force for cuBLAS and cuDNN ('0' keeps them in IEEE FP32; 'unset' when absent)."""
    return environ.get(TF32_OVERRIDE_VAR, "unset")


def tf32_in_use(device: str, state: str) -> bool:
    """Whether FP32 matmuls and convolutions may run as TF32: on a GPU, unless the override is '0'."""
    return device == "cuda" and state != "0"


def fp32_problem(device: str, state: str) -> str | None:
    """Why a GPU point cannot run IEEE FP32 with this override state (None: it can, or it is a CPU point)."""
    if not tf32_in_use(device, state):
        return None
    return (
        f"{TF32_OVERRIDE_VAR} is {state!r} in the MegEngine worker, not '0': MegEngine has no TF32 switch of its "
        "own, so its cuDNN convolutions would run fp32 as TF32; do not override it"
    )


__all__ = ["TF32_OVERRIDE_VAR", "fp32_problem", "override_state", "tf32_in_use"]
