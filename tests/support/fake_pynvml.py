"""A fake `pynvml` module: NVML replaced at its boundary (the module dlbench imports), with pynvml's real
exception classes and a scripted machine behind its nvml* functions. `install` puts it in sys.modules."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:  # the rehearsal's GPU (benchmarks/gpu/rehearsal) imports this where pytest is not installed
    import pytest


@dataclass
class FakeGpu:
    """One GPU; tests change its fields between samples. `fail_once` / `fail` map an nvml function name to the
    exception it raises once / every time; `energy_mj` None means the GPU has no energy counter."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    compute_capability: tuple[int, int] = (9, 0)
    used: int = 0
    total: int = 80 << 30
    procs: list[Any] = field(default_factory=list)
    sm_mhz: int = 210
    mem_mhz: int = 1593
    temperature_c: int = 31
    power_mw: int = 70_000
    energy_mj: int | None = 0
    fail_once: dict[str, Exception] = field(default_factory=dict)
    fail: dict[str, Exception] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)


def proc(pid: int, used: int | None) -> SimpleNamespace:
    """A process as NVML lists it (pid as NVML sees it: a host PID inside a container)."""
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


def fake_module(gpus: list[FakeGpu]) -> types.ModuleType:
    """A module with pynvml's names over the fake GPUs (handles are the FakeGpu objects)."""
    m = types.ModuleType("pynvml")

    def guard(name: str, fn: Any) -> Any:
        def call(h: FakeGpu, *args: Any) -> Any:
            h.calls[name] = h.calls.get(name, 0) + 1
            if name in h.fail_once:
                raise h.fail_once.pop(name)
            if name in h.fail:
                raise h.fail[name]
            return fn(h, *args)

        return call

    def energy(h: FakeGpu) -> int:
        if h.energy_mj is None:
            raise pynvml.NVMLError_NotSupported()
        return h.energy_mj

    for name in dir(pynvml):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(m, name, getattr(pynvml, name))
    table: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlDeviceGetHandleByUUID": lambda u: next(g for g in gpus if g.uuid == u.decode()),
        "nvmlSystemGetDriverVersion": lambda: "580.95",
        "nvmlDeviceGetUUID": guard("nvmlDeviceGetUUID", lambda h: h.uuid),
        "nvmlDeviceGetMemoryInfo": guard(
            "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used)
        ),
        "nvmlDeviceGetComputeRunningProcesses": guard("nvmlDeviceGetComputeRunningProcesses", lambda h: list(h.procs)),
        "nvmlDeviceGetGraphicsRunningProcesses": guard("nvmlDeviceGetGraphicsRunningProcesses", lambda h: []),
        "nvmlDeviceGetName": guard("nvmlDeviceGetName", lambda h: h.name),
        "nvmlDeviceGetCudaComputeCapability": guard(
            "nvmlDeviceGetCudaComputeCapability", lambda h: h.compute_capability
        ),
        "nvmlDeviceGetMaxClockInfo": guard(
            "nvmlDeviceGetMaxClockInfo", lambda h, kind: 1980 if kind == pynvml.NVML_CLOCK_SM else 2619
        ),
        "nvmlDeviceGetEnforcedPowerLimit": guard("nvmlDeviceGetEnforcedPowerLimit", lambda h: 700_000),
        "nvmlDeviceGetEccMode": guard("nvmlDeviceGetEccMode", lambda h: (1, 1)),
        "nvmlDeviceGetMigMode": guard("nvmlDeviceGetMigMode", lambda h: (0, 0)),
        "nvmlDeviceGetClockInfo": guard(
            "nvmlDeviceGetClockInfo", lambda h, kind: h.sm_mhz if kind == pynvml.NVML_CLOCK_SM else h.mem_mhz
        ),
        "nvmlDeviceGetTemperature": guard("nvmlDeviceGetTemperature", lambda h, kind: h.temperature_c),
        "nvmlDeviceGetPowerUsage": guard("nvmlDeviceGetPowerUsage", lambda h: h.power_mw),
        "nvmlDeviceGetTotalEnergyConsumption": guard("nvmlDeviceGetTotalEnergyConsumption", energy),
    }
    for name, fn in table.items():
        setattr(m, name, fn)
    return m


def install(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], visible: str | None = None) -> types.ModuleType:
    """Make `import pynvml` give the fake machine; CUDA_VISIBLE_DEVICES as given (unset for None)."""
    from dlbench.machine import env

    module = fake_module(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    env.gpus.cache_clear()  # env.gpus() remembers a process's GPUs; conftest forgets the fake's after the test
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return module


def gpus(n: int) -> list[FakeGpu]:
    """n idle GPUs with distinct UUIDs."""
    return [FakeGpu(f"GPU-{i:04x}-aaaa") for i in range(n)]
