"""Environment capture on the controller side, through libraries (psutil, py-cpuinfo, nvidia-ml-py).

The worker adds what only the framework knows (its version, CUDA/cuDNN/NCCL). Identity keys must match
before two results are compared; descriptive keys are only shown.
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import psutil

from dlbench import __version__, stamped_commit
from dlbench.machine.nvml import GpuInfo, gpu_info, session, visible_handles

IDENTITY_KEYS: tuple[str, ...] = (
    "framework",
    "framework_version",
    "device",
    "device_model",
    "device_count",
    "cpu_model",
    "cpu_cores",
    "cuda",
    "cudnn",
    "nccl",
    "driver",
    "threads",
    "dlbench_version",
    "math_mode",
)
# GPU settings recorded for the first visible GPU (descriptive: a clock drifts, a comparison still holds). The
# clocks the point ran at are sampled while it is measured (machine/telemetry.py), not read here, idle.
GPU_DESCRIPTIVE: tuple[str, ...] = (
    "uuid",
    "memory_bytes",
    "compute_capability",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "power_limit_w",
    "ecc",
    "mig",
)


_BRAND_FIELDS = ("model name", "cpu", "processor", "uarch")  # py-cpuinfo's own order for /proc/cpuinfo


def proc_cpuinfo_brand(text: str) -> str | None:
    """The brand py-cpuinfo reads from /proc/cpuinfo text: the first line, in file order, whose key is one of
    _BRAND_FIELDS and whose value is not a bare number (ARM's 'processor : 0'); None when there is none."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        value = value.strip()
        if sep and key.strip().lower() in _BRAND_FIELDS and value and not value.isdigit():
            return value
    return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's brand string, once per process: from /proc/cpuinfo on Linux, read as py-cpuinfo reads it first
    (the same string, without its ~1 s of probing), else from py-cpuinfo (falls back to platform.processor())."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            brand = proc_cpuinfo_brand(f.read())
        if brand:
            return brand
    except OSError:
        pass
    try:
        import cpuinfo

        return str(cpuinfo.get_cpu_info().get("brand_raw") or platform.processor() or "unknown")
    except Exception:
        return platform.processor() or "unknown"


@functools.lru_cache(maxsize=1)
def gpus() -> GpuInfo:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), through NVML; empty where there is none."""
    return gpu_info()


def cuda_available() -> bool:
    """Whether NVML sees at least one visible GPU (never imports a framework)."""
    return bool(gpus().devices)


def choose_device(device: str) -> tuple[str, str]:
    """(device, why) for --device: 'auto' takes the first visible NVIDIA GPU NVML reports, else the CPU."""
    if device != "auto":
        return device, f"--device {device}"
    info = gpus()
    if info.devices:
        first = info.devices[0]
        return "cuda", f"--device auto: NVML sees {len(info.devices)} visible GPU(s), the first a {first['name']}"
    why = (
        "CUDA_VISIBLE_DEVICES hides every GPU"
        if os.environ.get("CUDA_VISIBLE_DEVICES") == ""
        else "NVML reports no NVIDIA GPU"
    )
    return "cpu", f"--device auto: {why}, so the CPU"


def physical_cores() -> int:
    """Physical cores (logical where psutil cannot tell)."""
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the dlbench source tree, where it is a git checkout; else the one stamped in the tree when it
    was copied without .git (dlbench.COMMIT_FILE); else ''."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return stamped_commit()
    return out.stdout.strip() if out.returncode == 0 else stamped_commit()


def host_identity(device: str, threads: int) -> dict[str, str]:
    """The controller's identity keys for a point on this device."""
    g = gpus().devices
    ident = {
        "device": device,
        "cpu_model": cpu_model(),
        "cpu_cores": str(physical_cores()),
        "threads": str(threads),
        "dlbench_version": __version__,
    }
    if device == "cuda" and g:
        ident.update(device_model=g[0]["name"], device_count=str(len(g)), driver=gpus().driver)
    else:
        ident.update(device_model=cpu_model(), device_count="1")
    return ident


def host_descriptive(device: str = "cpu") -> dict[str, str]:
    """Keys that are shown but never block a comparison; on a GPU, the first visible GPU's settings too."""
    freq = psutil.cpu_freq()
    gpu: dict[str, str] = {}
    visible = gpus().devices if device == "cuda" else ()
    if visible:
        gpu = {f"gpu_{k}": visible[0][k] for k in GPU_DESCRIPTIVE}
        gpu["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset: all)")
        differ = [k for k in GPU_DESCRIPTIVE if k != "uuid" and len({d[k] for d in visible}) > 1]
        if differ:
            gpu["gpu_settings_differ"] = ", ".join(differ)
    return {
        **gpu,
        "hostname": socket.gethostname(),
        "cpu_mhz": f"{freq.current:.0f}" if freq else "",
        "cpu_max_mhz": f"{freq.max:.0f}" if freq and freq.max else "",
        "memory_bytes": str(psutil.virtual_memory().total),
        "logical_cpus": str(psutil.cpu_count() or 0),
        "os": platform.platform(),
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


_PCI_PATHS: dict[int, str] = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def interconnect() -> dict[str, str]:
    """How this node's visible GPUs are linked, through NVML: NVLink links per GPU, PCIe link, GPU 0-1 path."""
    with session() as pynvml:
        return {} if pynvml is None else _links(pynvml)


def _links(pynvml: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        handles = visible_handles(pynvml)
        if not handles:
            return {}
        links = 0
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                links += int(pynvml.nvmlDeviceGetNvLinkState(handles[0], link) == pynvml.NVML_FEATURE_ENABLED)
            except pynvml.NVMLError:  # link absent or NVLink unsupported on this GPU
                continue
        out["gpu_interconnect"] = "nvlink" if links else "pcie"
        out["nvlink_links_per_gpu"] = str(links)
        try:
            gen = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handles[0])
            width = pynvml.nvmlDeviceGetCurrPcieLinkWidth(handles[0])
            out["pcie_link"] = f"gen{gen} x{width}"
        except pynvml.NVMLError:
            pass
        if len(handles) > 1:
            try:
                level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[0], handles[1])
                out["gpu_pair_path"] = _PCI_PATHS.get(int(level), str(level))
            except pynvml.NVMLError:
                pass
    except pynvml.NVMLError as exc:  # a partial NVML (containers, MIG) must not fail a point: say what failed
        out["interconnect_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def node_topology(device: str) -> dict[str, str]:
    """What one rank records about its node: hostname, and the GPU interconnect where it runs on GPUs."""
    out = {"node_hostname": socket.gethostname()}
    if device == "cuda":
        out.update(interconnect())
    return out
