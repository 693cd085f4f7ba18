"""Why a framework's CUDA build sees no GPU, said as it is: a CPU build, no GPU, or a driver older than the build.

When the NVIDIA driver supports an older CUDA than the framework's wheel was built with (torch 2.11+cu130 under a
CUDA 12.x driver), the framework reports no CUDA device at all, while NVML (`dlbench env`) shows the GPU. The
point then says so, with the two versions, instead of "a CPU build, or no GPU". Framework-free: the backend
passes its build's CUDA version; NVML gives the GPUs and the driver's CUDA version.
"""

from __future__ import annotations

from dlbench.backends.gpu_arch import cuda_version
from dlbench.machine.nvml import gpu_info, session


def driver_cuda() -> str:
    """The newest CUDA version the installed driver supports ("12.4"), from NVML; '' where unknown."""
    with session() as nv:
        if nv is None:
            return ""
        try:
            return cuda_version(str(int(nv.nvmlSystemGetCudaDriverVersion())))
        except Exception:
            return ""


def _older(a: str, b: str) -> bool:
    """Whether CUDA version a is older than b ('12.4' < '13.0'); False where either is unknown."""
    try:
        return tuple(map(int, a.split("."))) < tuple(map(int, b.split(".")))
    except ValueError:
        return False


def no_device_reason(framework: str, build_cuda: str, driver: str | None = None, gpus: int | None = None) -> str:
    """One line: why `framework` (built with CUDA `build_cuda`, '' for a CPU build) sees no CUDA device, given the
    driver's CUDA version and the GPUs NVML sees (read here where None)."""
    build = cuda_version(build_cuda) if build_cuda else ""
    if not build:
        return f"{framework} here is a CPU build (no CUDA): install its CUDA build, or use --device cpu"
    seen = len(gpu_info().devices) if gpus is None else gpus
    if seen == 0:
        return f"{framework} (built for CUDA {build}) sees no CUDA device, and NVML sees no GPU: use --device cpu"
    drv = driver_cuda() if driver is None else driver
    if drv and _older(drv, build):
        return (
            f"the NVIDIA driver is older than this {framework} build: it supports CUDA {drv}, the build needs "
            f"CUDA {build}; update the driver, or install a {framework} build for CUDA {drv} or older"
        )
    return (
        f"{framework} (built for CUDA {build}) sees no CUDA device although NVML sees {seen} GPU(s): check "
        f"CUDA_VISIBLE_DEVICES and the driver (dlbench env --device cuda)"
    )


__all__ = ["driver_cuda", "no_device_reason"]
