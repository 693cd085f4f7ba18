"""GPU telemetry with NVML faked at pynvml: memory per device, the sampler's place and its errors, clocks while
measured, the idle check, GPU energy, and the run notes that name them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pynvml
import pytest

from dlbench.launch.watch import PointWatch
from dlbench.machine.gpu_watch import UNKNOWN_CONTAINER, GpuSampler, rank_devices
from dlbench.machine.telemetry import Telemetry, with_telemetry
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.report.telemetry import telemetry_notes
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import CONTROLLER_MEMORY, WATCHER_VAR, RankContext, WorkerResult, watcher_token
from tests.support.fake_pynvml import gpus, install, proc
from tests.support.paths import REPO

# --- telemetry: memory per device, the sampler's place and its errors, clocks while measured, the idle check ---
GiB = 1 << 30
OWN = {4101, 4102}


def _own(pid: int) -> bool:
    return pid in OWN


def test_memory_is_per_device_and_tf_mirrored_records_the_largest_device(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(8)
    nv = install(monkeypatch, g)
    # TF mirrored: one process over 8 GPUs (processes 1, 1n8c): the largest device, never the sum
    s = GpuSampler(nv, rank_devices(8, processes=1, devices_per_node=8, ranks=[(0, 0)]), _own)
    s.idle_check()
    for i, gpu in enumerate(g):
        gpu.procs = [proc(4101, (3 + (i == 5)) * GiB)]
    s.sample()
    assert s.rank_memory(0) == (4 * GiB, "nvml_process")  # today: 25 GiB, the 8 devices added


def test_each_rank_reports_only_its_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(2)
    nv = install(monkeypatch, g)
    s = GpuSampler(nv, rank_devices(2, processes=2, devices_per_node=2, ranks=[(0, 0), (1, 1)]), _own)
    s.idle_check()
    g[0].procs, g[1].procs = [proc(4101, 3 * GiB)], [proc(4102, 5 * GiB), proc(9999, 30 * GiB)]  # 9999: not ours
    s.sample()
    assert s.rank_memory(0) == (3 * GiB, "nvml_process")
    assert s.rank_memory(1) == (5 * GiB, "nvml_process")
    assert [sl.label for sl in s.slots] == ["0 (GPU-0000-aaaa)", "1 (GPU-0001-aaaa)"]  # matched by UUID and index


def test_container_fallback_is_a_delta_of_the_rank_own_idle_device_or_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(3)  # a PID namespace: NVML lists host PIDs, none of which is the point's
    nv = install(monkeypatch, g)
    s = GpuSampler(nv, rank_devices(3, processes=2, devices_per_node=2, ranks=[(0, 0), (1, 1)]), _own)
    s.idle_check()
    g[0].procs, g[0].used = [proc(880001, None)], 2 * GiB
    g[1].procs, g[1].used = [proc(880002, None)], 3 * GiB
    g[2].procs, g[2].used = [proc(880003, None)], 20 * GiB  # another job on a GPU the point does not use
    s.sample()
    # today each rank reports the rise over every visible GPU: 25 GiB, for both ranks
    assert s.rank_memory(0) == (2 * GiB, "nvml_device_delta")
    assert s.rank_memory(1) == (3 * GiB, "nvml_device_delta")


def test_container_fallback_says_unknown_when_the_device_is_not_the_point_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = gpus(1)
    nv = install(monkeypatch, g)
    g[0].procs, g[0].used = [proc(770001, None)], 10 * GiB  # another job holds the GPU before the point starts
    s = GpuSampler(nv, {0: (0,)}, _own)
    s.idle_check()
    g[0].procs, g[0].used = [proc(770001, None), proc(880001, None)], 14 * GiB
    s.sample()
    assert s.rank_memory(0) == (None, UNKNOWN_CONTAINER)  # today: 4 GiB, whoever grew

    g2 = gpus(1)  # idle at start, but a second process joins while the point runs
    nv2 = install(monkeypatch, g2)
    s2 = GpuSampler(nv2, {0: (0,)}, _own)
    s2.idle_check()
    g2[0].procs, g2[0].used = [proc(880001, None), proc(990001, None)], 6 * GiB
    s2.sample()
    assert s2.rank_memory(0) == (None, UNKNOWN_CONTAINER)


def test_the_sampler_survives_one_failed_nvml_call(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(1)
    nv = install(monkeypatch, g)
    s = GpuSampler(nv, {0: (0,)}, _own, interval_s=0.002)
    s.idle_check()
    g[0].fail_once["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLError_Unknown()
    s.start()
    time.sleep(0.02)
    g[0].procs = [proc(4101, 6 * GiB)]  # the point's memory appears after the failed call
    deadline = time.monotonic() + 2
    while g[0].calls.get("nvmlDeviceGetComputeRunningProcesses", 0) < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    s.stop()
    assert s.rank_memory(0) == (6 * GiB, "nvml_process")  # today: the first error stops the sampler: unknown
    assert s.errors == 1 and "NVMLError_Unknown" in s.error


def test_clocks_are_sampled_during_the_measured_windows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(1)
    nv = install(monkeypatch, g)
    s = GpuSampler(nv, {0: (0,)}, _own)
    s.idle_check()
    s.sample()  # warm-up: idle clocks, not recorded
    g[0].sm_mhz, g[0].temperature_c, g[0].power_mw = 1755, 64, 650_000
    s.edge("start")
    g[0].sm_mhz = 1980
    s.sample()
    s.edge("end")
    g[0].sm_mhz, g[0].power_mw = 210, 70_000  # after the run: what today's controller reads
    s.sample()
    clocks = s.clocks()
    assert (clocks["sm_mhz"].min, clocks["sm_mhz"].median, clocks["sm_mhz"].max) == (1755, 1980, 1980)
    assert clocks["power_w"].min == 650 and clocks["temperature_c"].max == 64 and clocks["mem_mhz"].n == 3


def test_an_idle_check_is_recorded_and_a_busy_gpu_flags_the_point(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(2)
    nv = install(monkeypatch, g)
    g[1].procs, g[1].used = [proc(770001, 3 * GiB)], 3 * GiB
    s = GpuSampler(nv, rank_devices(2, processes=2, devices_per_node=2, ranks=[(0, 0), (1, 1)]), _own)
    idle = s.idle_check()
    assert [(d.processes, d.used_bytes, d.idle) for d in idle] == [(0, 0, True), (1, 3 * GiB, False)]
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=4,
        protocol=Protocol(1, 2, 1, "median"),
        device="cuda",
        devices_per_node=2,
    )
    point = with_telemetry(PointResult(spec=spec, status="ok"), Telemetry(idle=idle))
    assert Telemetry.from_dict(point.extra["telemetry"]).flagged  # type: ignore[arg-type]


def test_gpu_energy_is_the_counter_over_the_windows_summed_over_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(2)
    nv = install(monkeypatch, g)
    s = GpuSampler(nv, rank_devices(2, processes=2, devices_per_node=2, ranks=[(0, 0), (1, 1)]), _own)
    for window in range(2):
        g[0].energy_mj, g[1].energy_mj = 10_000 * (window + 1), 50_000 * (window + 1)  # between windows: not counted
        s.edge("start")
        g[0].energy_mj += 500
        g[1].energy_mj += 1_000
        s.edge("end")
    assert s.energy() == (pytest.approx(3.0), "nvml_energy_counter", "")


def test_gpu_energy_falls_back_to_integrated_power_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(1)
    g[0].energy_mj = None  # pre-Volta: no energy counter
    nv = install(monkeypatch, g)
    now = [0.0]
    s = GpuSampler(nv, {0: (0,)}, _own, clock=lambda: now[0])
    g[0].power_mw = 100_000
    s.edge("start")
    now[0] = 1.0
    s.sample()
    now[0] = 2.0
    s.edge("end")
    joules, source, _ = s.energy()
    assert source == "nvml_power_integrated" and joules == pytest.approx(200.0)


def test_a_worker_the_controller_sees_leaves_memory_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import os, sys; from dlbench.wire import watched_by_controller; sys.exit(0 if watched_by_controller(os.environ) else 3)"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    seen = subprocess.run(
        [sys.executable, "-c", code], env={**env, WATCHER_VAR: watcher_token(os.getpid())}, check=False, timeout=60
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", code], env={**env, WATCHER_VAR: "1:123.000"}, check=False, timeout=60
    )
    assert (seen.returncode, elsewhere.returncode) == (0, 3)
    # the worker then records no figure of its own, and the controller fills in each rank's device
    from dlbench import worker

    install(monkeypatch, gpus(1))
    monkeypatch.setenv(WATCHER_VAR, watcher_token(os.getppid()))
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    spec = PointSpec(
        framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, 2, 1, "median"), device="cuda"
    )
    [rank] = worker.run(spec, RankContext()).ranks
    assert (rank.peak_memory_bytes, rank.memory_kind) == (None, CONTROLLER_MEMORY)
    # a rank on another host samples its own device itself
    g = gpus(2)
    install(monkeypatch, g)
    g[0].procs, g[1].procs = [proc(os.getpid(), GiB)], [proc(os.getpid(), 9 * GiB)]  # a stray context on GPU 1
    monkeypatch.setenv(WATCHER_VAR, "1:123.000")
    [rank] = worker.run(spec, RankContext()).ranks
    assert (rank.peak_memory_bytes, rank.memory_kind) == (GiB, "nvml_process")


def test_the_controller_fills_each_rank_memory_from_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(2)
    install(monkeypatch, g)
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)]
    try:
        spec = PointSpec(
            framework="fake",
            model="resnet50",
            batch_size=2,
            protocol=Protocol(1, 2, 1, "median"),
            device="cuda",
            devices_per_node=2,
        )
        with PointWatch(spec) as watch:
            g[0].procs = [proc(children[0].pid, 2 * GiB)]
            g[1].procs = [proc(children[1].pid, 7 * GiB)]
            assert watch.gpu is not None
            watch.gpu.sample()
        ranks = [RankRaw(r, (RepeatRaw((), 1.0, (1.0,), (2,)),), None, CONTROLLER_MEMORY) for r in range(2)]
        tele, worker = watch.finish(WorkerResult(status="ok", ranks=ranks))
    finally:
        for c in children:
            c.kill()
            c.wait()
    assert worker is not None
    assert [(r.peak_memory_bytes, r.memory_kind) for r in worker.ranks] == [
        (2 * GiB, "nvml_process"),
        (7 * GiB, "nvml_process"),
    ]
    assert all(d.idle for d in tele.idle) and len(tele.idle) == 2


def test_run_notes_name_a_busy_gpu_and_the_clocks_while_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(1)
    nv = install(monkeypatch, g)
    g[0].procs, g[0].used = [proc(770001, 2 * GiB)], 2 * GiB
    s = GpuSampler(nv, {0: (0,)}, _own)
    idle = s.idle_check()
    s.edge("start")
    s.edge("end")
    spec = PointSpec(
        framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, 2, 1, "median"), device="cuda"
    )
    from dlbench.protocol.stats import summarize

    ranks = (RankRaw(0, (RepeatRaw((), 1.0, (1.0,), (2,)),)),)
    point = with_telemetry(
        PointResult(spec=spec, status="ok", ranks=ranks, metrics=summarize(spec, ranks)),
        Telemetry(idle=idle, clocks=s.clocks()),
    )
    text = "\n".join(telemetry_notes([point]))
    assert "not idle before it started" in text and "SM clock 210/210/210 MHz" in text
