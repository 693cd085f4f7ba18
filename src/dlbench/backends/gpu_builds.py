"""Which framework has a build that runs on a Hopper (sm_90) or Blackwell (sm_100) GPU, and where to get it.

Told before a run (`dlbench setup --cuda`, `dlbench list`), so that a GPU user does not learn it from nine
refusals. Framework-free: what each framework's published wheels were built for, as of their newest releases
(the backend's `gpu_build` checks the installed one at run time: backends/gpu_arch).

| framework | Hopper | Blackwell | where |
|---|---|---|---|
| torch | yes | yes | PyPI's CUDA wheels (cu126 and newer carry sm_90; cu128 and newer sm_100) |
| jax | yes | yes | PyPI: the `jax-cuda` extra (jax[cuda13], with flax and optax) |
| tf | PTX | no | PyPI `tensorflow[and-cuda]`: SASS to sm_89 and compute_90 PTX, JIT-compiled once on Hopper |
| paddle | yes | ? | not on PyPI: PaddlePaddle's own index (cu126: sm_90; a Blackwell build not checked) |
| mxnet, oneflow, mindspore | no | no | CUDA 11 builds (no sm_90): MXNet only in NVIDIA's old NGC container |
| megengine | no | no | CUDA 11 wheels, for Python <= 3.10 only |
| jittor | ? | ? | compiles its kernels at first import with the machine's CUDA toolkit: untested here |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuBuilds:
    """One framework's GPU builds: whether one runs on Hopper / Blackwell ("yes", "PTX" = JIT-compiled, "no",
    "?" = unknown), whether PyPI has it, and what to do."""

    hopper: str
    blackwell: str
    on_pypi: bool
    how: str


BUILDS: dict[str, GpuBuilds] = {
    "torch": GpuBuilds("yes", "yes", True, "PyPI's CUDA wheels: dlbench setup --cuda torch"),
    "jax": GpuBuilds("yes", "yes", True, "PyPI: dlbench setup --cuda jax (extra jax-cuda: jax[cuda13], flax, optax)"),
    "tf": GpuBuilds("PTX", "no", True, "PyPI tensorflow[and-cuda]: on Hopper its compute_90 PTX is JIT-compiled "
                                       "once (recorded as ptx_jit); no Blackwell kernels yet"),
    "paddle": GpuBuilds("yes", "?", False, "not on PyPI: dlbench setup --cuda paddle --index-url "
                                           "https://www.paddlepaddle.org.cn/packages/stable/cu126/ (sm_90; a "
                                           "Blackwell build is not checked here)"),
    "mxnet": GpuBuilds("no", "no", False, "newest GPU wheel mxnet-cu117 (CUDA 11.7, no sm_90): only NVIDIA's old "
                                          "NGC MXNet container; register its Python with dlbench setup --existing"),
    "oneflow": GpuBuilds("no", "no", False, "its GPU wheels need CUDA 11 (no sm_90 kernels): none runs on Hopper"),
    "mindspore": GpuBuilds("no", "no", False, "its GPU wheels need CUDA 11 (no sm_90 kernels): none runs on Hopper"),
    "megengine": GpuBuilds("no", "no", False, "MegEngine's wheels: CUDA 11, Python <= 3.10 only; none runs on "
                                              "Hopper"),
    "jittor": GpuBuilds("?", "?", True, "compiles its kernels at first import with the machine's CUDA toolkit "
                                        "(nvcc); not yet run on a Hopper GPU"),
}


def gpu_builds(framework: str) -> GpuBuilds | None:
    """What dlbench knows of the framework's GPU builds; None for a framework it knows nothing of (a plugin)."""
    return BUILDS.get(framework)


def advice(framework: str) -> str:
    """One line: whether a build of the framework runs on Hopper and Blackwell GPUs, and what to do."""
    b = gpu_builds(framework)
    if b is None:
        return f"{framework}: dlbench knows nothing of its GPU builds"
    return f"{framework}: Hopper {b.hopper}, Blackwell {b.blackwell}; {b.how}"


def comparable(generation: str) -> list[str]:
    """The frameworks with a build that runs on a GPU generation ("hopper" or "blackwell"), PTX JIT included."""
    return [fw for fw, b in BUILDS.items() if getattr(b, generation) in ("yes", "PTX")]


__all__ = ["BUILDS", "GpuBuilds", "advice", "comparable", "gpu_builds"]
