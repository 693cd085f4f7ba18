"""A fake machine behind pynvml's nvml* functions (the real pynvml module and its real exception classes, NVML
replaced at its boundary only): GPUs as FakeGpu objects, each nvml function able to fail on purpose."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest


@dataclass
class FakeGpu:
    """One GPU of the fake machine; `fail` maps an nvml function name to the exception it raises."""

    name: str
    uuid: str
    used: int = 1 << 30
    procs: list[Any] = field(default_factory=list)
    fail: dict[str, Exception] = field(default_factory=dict)


def install(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
    """Put the fake machine behind pynvml's functions (handles are the FakeGpu objects)."""

    def guard(fn_name: str, fn: Any) -> Any:
        def call(h: FakeGpu, *args: Any) -> Any:
            if fn_name in h.fail:
                raise h.fail[fn_name]
            return fn(h, *args)

        return call

    def init() -> None:
        if init_error is not None:
            raise init_error

    table: dict[str, Any] = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlSystemGetDriverVersion": lambda: "580.95",
        "nvmlDeviceGetUUID": guard("nvmlDeviceGetUUID", lambda h: h.uuid),
        "nvmlDeviceGetName": guard("nvmlDeviceGetName", lambda h: h.name),
        "nvmlDeviceGetMemoryInfo": guard(
            "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=80 << 30, used=h.used)
        ),
        "nvmlDeviceGetCudaComputeCapability": guard("nvmlDeviceGetCudaComputeCapability", lambda h: (9, 0)),
        "nvmlDeviceGetClockInfo": guard("nvmlDeviceGetClockInfo", lambda h, kind: 1980 if kind == 1 else 2619),
        "nvmlDeviceGetMaxClockInfo": guard("nvmlDeviceGetMaxClockInfo", lambda h, kind: 1980),
        "nvmlDeviceGetEnforcedPowerLimit": guard("nvmlDeviceGetEnforcedPowerLimit", lambda h: 700000),
        "nvmlDeviceGetEccMode": guard("nvmlDeviceGetEccMode", lambda h: (1, 1)),
        "nvmlDeviceGetMigMode": guard("nvmlDeviceGetMigMode", lambda h: (0, 1)),
        "nvmlDeviceGetComputeRunningProcesses": guard("nvmlDeviceGetComputeRunningProcesses", lambda h: h.procs),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
    }
    for name, fn in table.items():
        monkeypatch.setattr(pynvml, name, fn)
