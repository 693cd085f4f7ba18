"""Whether a framework's GPU build has kernels for this GPU, checked before a point builds anything.

A wheel carries machine code (SASS) for the GPU architectures it was compiled for, and perhaps PTX that the
driver compiles at start-up for newer ones. On a GPU newer than its build (mxnet-cu112 or OneFlow's CUDA 11.7 /
cuDNN 8.5 wheel on an H100, sm_90) a framework fails late with "no kernel image is available", or JIT-compiles
every kernel from PTX for minutes inside the warm-up. dlbench refuses such a point at once, in one line.

What a build was compiled for comes from the framework where it says (torch's `get_arch_list()`, TensorFlow's
build info), else from the CUDA version it was built with: a CUDA toolkit compiles for no GPU newer than it
knows (`NEWEST_ARCH`). The GPU's compute capability comes from NVML. Framework-free: a backend reports its
`GpuBuild`, the worker checks it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dlbench.machine.nvml import gpu_info
from dlbench.wire import RankContext

# The newest compute capability each CUDA toolkit release compiles for, from NVIDIA's CUDA release notes:
# 11.0 added sm_80 (A100), 11.1 sm_86, 11.8 sm_89 and sm_90 (H100), 12.8 sm_100 and sm_120 (Blackwell).
NEWEST_ARCH: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((11, 0), (8, 0)),
    ((11, 1), (8, 6)),
    ((11, 8), (9, 0)),
    ((12, 8), (12, 0)),
)
_ARCH = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


@dataclass(frozen=True)
class GpuBuild:
    """What a framework's GPU build was compiled for: its CUDA version ("11.2") and, where the framework lists
    them, its kernel architectures ("sm_80", "compute_90"); `source` says where they were read."""

    framework: str
    cuda: str = ""
    archs: tuple[str, ...] = ()
    source: str = ""


def cuda_version(text: str) -> str:
    """'11.2' from 'cu112', '11.2', '11020' (CUDA's integer) or a distribution such as 'mxnet-cu112'; '' if none."""
    text = text.strip()
    m = re.search(r"cu(\d+)(\d)\b", text)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    m = re.fullmatch(r"(\d+)\.(\d+)(\.\d+)*", text)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    if text.isdigit() and len(text) >= 4:  # 11020 = 11.2
        return f"{int(text) // 1000}.{int(text) % 1000 // 10}"
    return ""


def _capability(text: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def newest_arch(cuda: str) -> tuple[int, int] | None:
    """The newest compute capability a CUDA version compiles for (None: unknown or older than 11.0)."""
    parts = cuda_version(cuda).split(".")
    if len(parts) != 2:
        return None
    version = (int(parts[0]), int(parts[1]))
    known = [arch for first, arch in NEWEST_ARCH if first <= version]
    return known[-1] if known else None


def _runs(arch: str, cap: tuple[int, int]) -> str:
    """'sass' when the architecture's machine code runs on the GPU, 'ptx' when its PTX can be JIT-compiled for
    it, '' when neither (SASS runs on its own major version at an equal or higher minor; 'a' builds only on their
    exact GPU; PTX on any GPU at least as new)."""
    m = _ARCH.fullmatch(arch.strip())
    if not m:
        return ""
    have = (int(m.group(2)), int(m.group(3)))
    if m.group(1) == "compute":
        return "ptx" if have <= cap else ""
    if m.group(4) == "a":
        return "sass" if have == cap else ""
    return "sass" if have[0] == cap[0] and have[1] <= cap[1] else ""


def refusal(capability: str, gpu_name: str, build: GpuBuild) -> str | None:
    """One line saying why this build cannot run on a GPU of this compute capability ("9.0"), or None when it
    can, or when either side is unknown."""
    cap = _capability(capability)
    if cap is None:
        return None
    sm = f"sm_{cap[0]}{cap[1]}"
    gpu = f"this GPU ({gpu_name}, {sm})" if gpu_name else f"this GPU ({sm})"
    if any(_ARCH.fullmatch(a.strip()) for a in build.archs):
        kinds = {_runs(a, cap) for a in build.archs}
        if "sass" in kinds or ptx_jit(capability, build):
            return None
        listed = ", ".join(build.archs)
        if "ptx" in kinds:
            return (
                f"{build.framework}'s build has no kernels for {gpu}, only PTX the driver would compile at "
                f"start for minutes ({build.source}: {listed}): install a build for {sm}"
            )
        return (
            f"{build.framework}'s build has no kernels for {gpu} ({build.source}: {listed}): install a build for {sm}"
        )
    newest = newest_arch(build.cuda)
    if newest is None or cap[0] <= newest[0]:
        return None
    needs = next((f"{v[0]}.{v[1]}" for v, arch in NEWEST_ARCH if arch[0] >= cap[0]), "a newer CUDA")
    return (
        f"{build.framework} was built with CUDA {cuda_version(build.cuda)} ({build.source}), which compiles for "
        f"GPUs up to sm_{newest[0]}{newest[1]}: {gpu} would fail late or JIT-compile for minutes; install a "
        f"build for CUDA {needs} or newer"
    )


# The driver's JIT cache must hold a whole framework's kernels compiled from PTX, so that they are compiled once (in
# the warm-up) and not again in each worker: CUDA's default cache is 256 MiB, too small for TensorFlow's.
JIT_CACHE_BYTES = 4 << 30


def _major(arch: str) -> int:
    """The major version of an architecture name ('compute_90' -> 9); -1 if it is none."""
    m = _ARCH.fullmatch(arch.strip())
    return int(m.group(2)) if m else -1


def ptx_jit(capability: str, build: GpuBuild) -> str | None:
    """The fact to record when the build has no machine code for this GPU but PTX of the GPU's own major version
    ("compute_90" on a 9.x GPU), which the driver JIT-compiles once and runs; None otherwise. PTX of an older
    major (compute_90 on a Blackwell GPU) stays refused: it runs, but without the new architecture's features."""
    cap = _capability(capability)
    if cap is None or any(_runs(a, cap) == "sass" for a in build.archs):
        return None
    ptx = [a for a in build.archs if _runs(a, cap) == "ptx" and _major(a) == cap[0]]
    if not ptx:
        return None
    return (
        f"{build.framework}'s build has no sm_{cap[0]}{cap[1]} machine code: the driver JIT-compiles its "
        f"{', '.join(ptx)} PTX once, in the warm-up (CUDA_CACHE_MAXSIZE={JIT_CACHE_BYTES})"
    )


def rank_ptx_jit(build: GpuBuild | None, ctx: RankContext) -> str | None:
    """`ptx_jit` for this rank's GPU; where it applies, raises CUDA's JIT cache to JIT_CACHE_BYTES for this process
    (read when the framework creates its CUDA context, after this check), unless the user set it."""
    gpu = rank_gpu(ctx) if build is not None else {}
    fact = ptx_jit(gpu.get("compute_capability", ""), build) if build is not None and gpu else None
    if fact:
        os.environ.setdefault("CUDA_CACHE_MAXSIZE", str(JIT_CACHE_BYTES))
    return fact


def rank_gpu(ctx: RankContext) -> dict[str, str]:
    """NVML's facts of this rank's GPU (name, compute capability, MIG mode ...): the visible GPU at its device
    index; {} where NVML sees none."""
    devices = gpu_info().devices
    return dict(devices[ctx.device_index(len(devices))]) if devices else {}


def rank_refusal(build: GpuBuild | None, ctx: RankContext) -> str | None:
    """Why this rank's GPU cannot run the build (see `refusal`), or None."""
    if build is None:
        return None
    gpu = rank_gpu(ctx)
    return refusal(gpu.get("compute_capability", ""), gpu.get("name", ""), build) if gpu else None


__all__ = [
    "JIT_CACHE_BYTES",
    "NEWEST_ARCH",
    "GpuBuild",
    "cuda_version",
    "newest_arch",
    "ptx_jit",
    "rank_gpu",
    "rank_ptx_jit",
    "rank_refusal",
    "refusal",
]
