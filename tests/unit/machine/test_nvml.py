"""NVML failure handling and visible-device mapping, with NVML replaced at its boundary only: the real pynvml
module, its real exception classes, and a fake machine behind its nvml* functions."""

from __future__ import annotations

import warnings

import pynvml
import pytest

from dlbench.machine import nvml
from dlbench.machine.env import choose_device
from tests.support.nvml_machine import FakeGpu, install


def machine() -> list[FakeGpu]:
    return [FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa-0000"), FakeGpu("NVIDIA H100 80GB HBM3", "GPU-bbbb-1111")]


def test_no_nvml_library_means_no_gpu_and_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [], init_error=pynvml.NVMLError_LibraryNotFound())
    assert nvml.gpu_info() == nvml.GpuInfo()
    device, why = choose_device("auto")
    assert device == "cpu" and "NVML" in why


@pytest.mark.parametrize(
    "visible, uuids",
    [
        (None, ["GPU-aaaa-0000", "GPU-bbbb-1111"]),
        ("1", ["GPU-bbbb-1111"]),
        ("1,0", ["GPU-bbbb-1111", "GPU-aaaa-0000"]),  # CUDA's order is the variable's order
        ("GPU-bbbb", ["GPU-bbbb-1111"]),  # a UUID prefix, as CUDA accepts
        ("0,7,1", ["GPU-aaaa-0000"]),  # CUDA stops at the first entry that names no device
        ("", []),
    ],
)
def test_visible_devices_follow_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, uuids: list[str]
) -> None:
    install(monkeypatch, machine())
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert [d["uuid"] for d in nvml.gpu_info().devices] == uuids


def test_device_facts_record_clocks_power_ecc_and_mig(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, machine()[:1])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", nvml.NvmlWarning)  # a healthy GPU warns about nothing
        info = nvml.gpu_info()
    d = info.devices[0]
    assert info.driver == "580.95"
    assert (d["compute_capability"], d["sm_clock_mhz"], d["mem_clock_mhz"], d["power_limit_w"]) == (
        "9.0",
        "1980",
        "2619",
        "700",
    )
    assert d["ecc"] == "on" and d["mig"] == "off (pending on)"


def test_an_nvml_error_is_unknown_with_one_warning_never_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = machine()[0]
    gpu.fail = {
        "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVMLError_GpuIsLost(),
        "nvmlDeviceGetMigMode": pynvml.NVMLError_NotSupported(),
    }
    install(monkeypatch, [gpu])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.warns(nvml.NvmlWarning, match="power limit") as caught:
        d = nvml.gpu_info().devices[0]
    assert d["power_limit_w"] == nvml.UNKNOWN and d["mig"] == nvml.UNKNOWN
    assert len(caught) == 1  # NotSupported is an answer (the GPU has no MIG), not a failure
    assert d["name"] == "NVIDIA H100 80GB HBM3"


def test_a_failing_device_list_degrades_to_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = machine()[0]
    gpu.fail = {"nvmlDeviceGetUUID": pynvml.NVMLError_Unknown()}
    install(monkeypatch, [gpu])
    with pytest.warns(nvml.NvmlWarning, match="device list"):
        info = nvml.gpu_info()
    assert info == nvml.GpuInfo(driver=nvml.UNKNOWN)


# The device-memory sampler (once ProcessMemory here) is machine/gpu_watch.py's GpuSampler: memory per device,
# its container fallback and its survival of a failed call are tested in test_telemetry.py.
