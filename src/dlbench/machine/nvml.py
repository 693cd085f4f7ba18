"""Everything dlbench reads through NVML (nvidia-ml-py): the GPUs this process may use, their settings, and the
device memory a process uses. Never imports a framework; never crashes a run.

- **Visible devices.** NVML numbers every GPU of the machine; CUDA numbers those in CUDA_VISIBLE_DEVICES (indices
  or GPU-/MIG- UUIDs, UUID prefixes allowed). dlbench records the visible ones, in CUDA's order.
- **Failures.** NVML missing (a CPU machine) means no GPU. An NVML error after init (a partial NVML in a container,
  a GPU fallen off the bus) turns the affected fields into "unknown" and issues one `NvmlWarning`.
- **Memory, clocks, energy** of a point's own GPUs while it runs: machine/gpu_watch.py, sampled by the controller
  (launch/watch.py), or by a rank on another host for its own device.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

UNKNOWN = "unknown"


class NvmlWarning(UserWarning):
    """NVML answered with an error: the fields it could not read are recorded as unknown."""


def _warn(what: str, exc: BaseException) -> None:
    warnings.warn(
        f"NVML could not read {what} ({type(exc).__name__}: {exc}); recorded as unknown", NvmlWarning, stacklevel=3
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def session() -> Iterator[Any]:
    """pynvml, initialised for the block; None where there is no NVML (no library or no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML library, or no driver: a CPU machine
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _physical(nv: Any) -> list[tuple[Any, str]]:
    """(handle, uuid) of every GPU NVML sees, in NVML's (PCI bus) order."""
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out.append((h, _text(nv.nvmlDeviceGetUUID(h))))
    return out


def visible_handles(nv: Any, spec: str | None = None) -> list[Any]:
    """The handles of the GPUs CUDA would show this process, in CUDA's order (CUDA_VISIBLE_DEVICES honoured).

    Integer entries are NVML indices (CUDA's order matches NVML's under CUDA_DEVICE_ORDER=PCI_BUS_ID, and on the
    usual machine whose GPUs are all one model); UUID entries (GPU-..., MIG-...) match by prefix. As in CUDA, the
    list stops at the first entry that names no device."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES") if spec is None else spec
    physical = _physical(nv)
    if raw is None:
        return [h for h, _ in physical]
    out: list[Any] = []
    for entry in (e.strip() for e in raw.split(",")):
        if entry.isdigit() and int(entry) < len(physical):
            out.append(physical[int(entry)][0])
        elif entry.startswith(("GPU-", "MIG-")):
            found = [h for h, uuid in physical if uuid.startswith(entry)] if entry.startswith("GPU-") else []
            if not found and entry.startswith("MIG-"):
                with contextlib.suppress(Exception):
                    found = [nv.nvmlDeviceGetHandleByUUID(entry.encode())]
            if len(found) != 1:
                break
            out.append(found[0])
        else:
            break
    return out


def _read(what: str, fn: Any, *args: Any) -> Any:
    """fn(*args), or None after an NvmlWarning when NVML answers with an error."""
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError_NotSupported, _GpuIsLost, _Unknown ...: unknown, never a crash
        if type(exc).__name__ != "NVMLError_NotSupported":
            _warn(what, exc)
        return None


def _mode(pair: Any) -> str:
    """'on', 'off' or 'on (pending off)' from NVML's (current, pending) pair."""
    if pair is None:
        return UNKNOWN
    current, pending = pair if isinstance(pair, (list, tuple)) else (pair, pair)
    word = {0: "off", 1: "on"}
    text = word.get(int(current), str(current))
    return text if pending == current else f"{text} (pending {word.get(int(pending), str(pending))})"


def device_facts(nv: Any, h: Any) -> dict[str, str]:
    """Name, memory, clocks, power limit, ECC and MIG mode of one GPU; a field NVML cannot read is 'unknown'."""

    def text(what: str, fn: Any, *args: Any, fmt: Any = _text) -> str:
        value = _read(what, fn, *args)
        return UNKNOWN if value is None else fmt(value)

    mem = _read("memory", nv.nvmlDeviceGetMemoryInfo, h)
    cc = _read("compute capability", nv.nvmlDeviceGetCudaComputeCapability, h)
    return {
        "name": text("the name", nv.nvmlDeviceGetName, h),
        "uuid": text("the UUID", nv.nvmlDeviceGetUUID, h),
        "memory_bytes": UNKNOWN if mem is None else str(mem.total),
        "compute_capability": UNKNOWN if cc is None else f"{cc[0]}.{cc[1]}",
        "sm_clock_mhz": text("the SM clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        "sm_clock_max_mhz": text("the max SM clock", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": text("the memory clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        "mem_clock_max_mhz": text("the max memory clock", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
        "power_limit_w": text(
            "the power limit", nv.nvmlDeviceGetEnforcedPowerLimit, h, fmt=lambda mw: f"{int(mw) / 1000:g}"
        ),
        "ecc": _mode(_read("the ECC mode", nv.nvmlDeviceGetEccMode, h)),
        "mig": _mode(_read("the MIG mode", nv.nvmlDeviceGetMigMode, h)),
    }


@dataclass(frozen=True)
class GpuInfo:
    """The visible GPUs' facts and the driver version; empty on a machine without NVML."""

    devices: tuple[dict[str, str], ...] = ()
    driver: str = ""


def gpu_info() -> GpuInfo:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), with their settings."""
    with session() as nv:
        if nv is None:
            return GpuInfo()
        try:
            handles = visible_handles(nv)
        except Exception as exc:  # the device list itself failed: no GPU we can describe
            _warn("the device list", exc)
            return GpuInfo(driver=UNKNOWN)
        driver = _read("the driver version", nv.nvmlSystemGetDriverVersion)
        return GpuInfo(tuple(device_facts(nv, h) for h in handles), UNKNOWN if driver is None else _text(driver))


def no_gpu_reason() -> str | None:
    """Why NVML shows this process no GPU (one line: the library missing, NVML failing to start, no GPU, or
    CUDA_VISIBLE_DEVICES hiding them), or None when it shows at least one."""
    try:
        import pynvml
    except Exception as exc:
        return f"NVML cannot be loaded ({type(exc).__name__}: {exc}; the nvidia-ml-py package provides it)"[:300]
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"NVML could not start ({type(exc).__name__}: {exc}): no NVIDIA driver here, or it is not reachable"[
            :300
        ]
    try:
        if visible_handles(pynvml):
            return None
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        if shown is not None and _physical(pynvml):
            return f"CUDA_VISIBLE_DEVICES={shown!r} hides every GPU NVML sees"
        return "NVML reports no NVIDIA GPU"
    except Exception as exc:
        return f"NVML could not list the GPUs ({type(exc).__name__}: {exc})"[:300]
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


__all__ = [
    "UNKNOWN",
    "GpuInfo",
    "NvmlWarning",
    "device_facts",
    "gpu_info",
    "no_gpu_reason",
    "session",
    "visible_handles",
]
