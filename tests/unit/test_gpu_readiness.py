"""Issue 21: what the first GPU run must get right, each checked on this CPU with NVML (and CUDA) mocked only at
their boundary. Helpers append their own section, named after their area."""

from __future__ import annotations

# --- telemetry: memory per device, the sampler's place and its errors, clocks while measured, the idle check ---
import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest
from fake_pynvml import gpus, install, proc

from dlbench.launch.watch import PointWatch
from dlbench.report.telemetry import telemetry_notes
from dlbench.results.gpu_watch import UNKNOWN_CONTAINER, GpuSampler, rank_devices
from dlbench.results.schema import PointResult, RankRaw, RepeatRaw
from dlbench.results.telemetry import Telemetry, with_telemetry
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import (
    CONTROLLER_MEMORY,
    WATCHER_VAR,
    RankContext,
    WorkerResult,
    watcher_token,
)

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
        monkeypatch: pytest.MonkeyPatch) -> None:
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
    spec = PointSpec(framework="fake", model="resnet50", batch_size=4, protocol=Protocol(1, 2, 1, "median"),
                     device="cuda", devices_per_node=2)
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
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    seen = subprocess.run([sys.executable, "-c", code], env={**env, WATCHER_VAR: watcher_token(os.getpid())},
                          check=False, timeout=60)
    elsewhere = subprocess.run([sys.executable, "-c", code], env={**env, WATCHER_VAR: "1:123.000"}, check=False,
                               timeout=60)
    assert (seen.returncode, elsewhere.returncode) == (0, 3)
    # the worker then records no figure of its own, and the controller fills in each rank's device
    from dlbench import worker

    install(monkeypatch, gpus(1))
    monkeypatch.setenv(WATCHER_VAR, watcher_token(os.getppid()))
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    spec = PointSpec(framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, 2, 1, "median"),
                     device="cuda")
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
        spec = PointSpec(framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, 2, 1, "median"),
                         device="cuda", devices_per_node=2)
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
    assert [(r.peak_memory_bytes, r.memory_kind) for r in worker.ranks] == [(2 * GiB, "nvml_process"),
                                                                           (7 * GiB, "nvml_process")]
    assert all(d.idle for d in tele.idle) and len(tele.idle) == 2


def test_run_notes_name_a_busy_gpu_and_the_clocks_while_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gpus(1)
    nv = install(monkeypatch, g)
    g[0].procs, g[0].used = [proc(770001, 2 * GiB)], 2 * GiB
    s = GpuSampler(nv, {0: (0,)}, _own)
    idle = s.idle_check()
    s.edge("start")
    s.edge("end")
    spec = PointSpec(framework="fake", model="resnet50", batch_size=2, protocol=Protocol(1, 2, 1, "median"),
                     device="cuda")
    from dlbench.protocol.stats import summarize

    ranks = (RankRaw(0, (RepeatRaw((), 1.0, (1.0,), (2,)),)),)
    point = with_telemetry(PointResult(spec=spec, status="ok", ranks=ranks, metrics=summarize(spec, ranks)),
                           Telemetry(idle=idle, clocks=s.clocks()))
    text = "\n".join(telemetry_notes([point]))
    assert "not idle before it started" in text and "SM clock 210/210/210 MHz" in text


# --- gpu-b: Paddle, TF, JAX BatchNorm, fairness loops, MegEngine ---
# (os, sys, Path and pytest: imported above)
import dataclasses
import importlib
import itertools
import re
from collections.abc import Mapping

import torch

from dlbench.backends.base import Unsupported
from dlbench.backends.megengine import tf32 as mge_tf32
from dlbench.backends.paddle import gpu_defaults
from dlbench.cases import get_case
from dlbench.numerics import resolve_precision
from dlbench.report.document import build_report
from dlbench.report.groups import build_sections
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.report.table import points_table
from dlbench.results.store import Store
from dlbench.spec import preset
from dlbench.suite import load as load_suite
from dlbench.suite.expand import expand

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "fairness_loops")]
import common as loop_common  # benchmarks/fairness_loops/common.py: the bare loops' command line
import fairness  # benchmarks/fairness.py

FlagValue = bool | int


class FakePaddleFlags:
    """paddle.get_flags / paddle.set_flags of a build: the flags it was compiled with; any other flag raises the
    ValueError paddle raises for a flag the build lacks."""

    def __init__(self, flags: Mapping[str, FlagValue]) -> None:
        self.flags = dict(flags)
        self.set_calls: list[dict[str, FlagValue]] = []

    def get_flags(self, names: list[str]) -> dict[str, FlagValue]:
        for n in names:
            if n not in self.flags:
                raise ValueError(f"Flag {n} cannot get its value through this function.")
        return {n: self.flags[n] for n in names}

    def set_flags(self, values: dict[str, FlagValue]) -> None:
        self.get_flags(list(values))
        self.set_calls.append(dict(values))
        self.flags.update(values)


# A CUDA build of paddle 3.x as it starts: TF32 on for cuBLAS (its default), the benchmark flags at theirs.
CUDA_BUILD = {"FLAGS_allow_tf32_cublas": True, "FLAGS_allow_tf32_cudnn": True, "FLAGS_cudnn_exhaustive_search": False,
              "FLAGS_conv_workspace_size_limit": 512, "FLAGS_cudnn_batchnorm_spatial_persistent": False,
              "FLAGS_max_inplace_grad_add": 0}


def _point(framework: str, precision: str, extra: dict[str, object]) -> object:
    # the report tests' factory: real statistics over synthetic steps
    from test_report import make_point

    p = make_point(framework, device="cuda", extra=extra, identity={"device": "cuda", "device_model": "NVIDIA H100"})
    return dataclasses.replace(p, spec=dataclasses.replace(p.spec, precision=precision))


def test_amp_host_sync_fact_is_shown_in_report_and_run_notes(tmp_path: Path) -> None:
    why = "the loss scaler reads the overflow flag on the host every step (TensorFlow's own: ...)"
    points = [_point("tf", "amp", {"amp_host_sync": why}), _point("torch", "amp", {})]
    store = Store(tmp_path / "s.db")
    run = store.create_run("dlbench run (gpu-b)")
    for p in points:
        store.add_point(run, p)  # type: ignore[arg-type]
    stored = store.points()
    [amp] = build_sections(stored)
    marked = {col.framework: cell.remark for (_, col), cell in amp.cells.items()}
    assert marked == {"tf": "a", "torch": None}  # the tf amp cell only, never torch's
    assert [(r.mark, r.text) for r in amp.remarks] == [("a", f"TensorFlow/Keras amp: {why}")]
    report = build_report(store.runs(), stored)
    page = render_html(report)
    assert '<sup class="remark">[a]</sup>' in page and f"[a] TensorFlow/Keras amp: {why}" in page.replace("&#39;", "'")
    md = tmp_path / "r.md"
    write_markdown(report, md)
    text = md.read_text()
    assert re.search(r"\*\*[\d.,]+\*\* ± [\d.,]+ \[a\]<br>", text)  # the tf amp cell, marked
    assert text.count(" [a]<br>") == 1 and "- [a] TensorFlow/Keras amp: the loss scaler reads" in text
    caption = str(points_table([p.result for p in stored]).caption)  # what `dlbench run` prints under its table
    assert f"tf amp: {why}" in caption and "torch amp" not in caption


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp", "bf16"])
def test_paddle_gpu_defaults_are_those_of_paddles_resnet50_benchmark(precision: str) -> None:
    numerics = resolve_precision(precision, "cuda")
    plan = gpu_defaults.plan("cuda", numerics, channels_last=False, nhwc_model=True)
    assert plan.flags["FLAGS_cudnn_exhaustive_search"] is True
    assert plan.flags["FLAGS_conv_workspace_size_limit"] == 4000
    assert plan.flags["FLAGS_cudnn_batchnorm_spatial_persistent"] is True
    assert {plan.flags[f] for f in gpu_defaults.TF32_FLAGS} == {precision == "tf32"}
    assert (plan.layout, plan.amp_level, plan.master_weights) == {
        "amp": ("NHWC", "O2", True), "bf16": ("NCHW", "O1", False)}.get(precision, ("NCHW", None, False))
    # what the backend applies on a CUDA build (paddle's flag functions mocked): set, read back, recorded
    build = FakePaddleFlags(CUDA_BUILD)
    applied = gpu_defaults.apply_flags(plan.flags, build.set_flags, build.get_flags)
    assert applied == plan.flags and build.flags == {**CUDA_BUILD, **plan.flags}
    assert gpu_defaults.flag_facts(applied)["cudnn_exhaustive_search"] == "True"
    assert plan.facts()["paddle_amp_level"] == (plan.amp_level or "none")
    # a model without an NHWC form keeps NCHW, and --channels-last on it is refused in one line
    assert gpu_defaults.plan("cuda", numerics, False, nhwc_model=False).layout == "NCHW"
    with pytest.raises(Unsupported, match="NCHW only"):
        gpu_defaults.plan("cuda", numerics, channels_last=True, nhwc_model=False)


def test_paddle_gpu_defaults_are_inert_on_the_cpu_and_the_paddle_suite_uses_them() -> None:
    cpu = gpu_defaults.plan("cpu", resolve_precision("fp32", "cpu"), channels_last=False, nhwc_model=True)
    assert cpu.flags == {} and cpu.layout == "NCHW"
    cpu_build = FakePaddleFlags({"FLAGS_max_inplace_grad_add": 0})  # a CPU build: no cuDNN or TF32 flag
    assert gpu_defaults.apply_flags(cpu.flags, cpu_build.set_flags, cpu_build.get_flags) == {}
    assert cpu_build.set_calls == []
    suite = load_suite("paddle")
    suite = suite.model_copy(update={"axes": suite.axes.model_copy(update={"framework": ["paddle"]})})
    points = [p.spec for p in expand(suite, "cuda", data_dir="/data")]
    assert {s.precision for s in points} == {"fp32", "amp"}
    for s in points:
        plan = gpu_defaults.plan(s.device, resolve_precision(s.precision, s.device), s.channels_last,
                                 gpu_defaults.has_nhwc(get_case(s.model)))
        assert plan.flags["FLAGS_cudnn_exhaustive_search"] is True
        assert (plan.layout, plan.amp_level) == (("NHWC", "O2") if s.precision == "amp" else ("NCHW", None))


def test_paddle_compile_and_jax_batchnorm_fairness_compares_compiled_points() -> None:
    """benchmarks/fairness.py measures --compile too (Paddle's to_static default against the loop's; the
    SOT converter and flax's fast-variance BatchNorm themselves are checked in the paddle and jax integration
    tests), each side with its framework's default compiler."""
    a = fairness.parser().parse_args(["-f", "paddle,jax", "--compile"])
    for fw in ("paddle", "jax", "torch", "tf"):
        assert loop_common.parse_args(None, fairness.loop_argv(fw, a)).compile
        assert "--compile" in fairness.dlbench_argv(fw, a, Path("s.db"))
    plain = fairness.parser().parse_args(["-f", "paddle"])
    assert not loop_common.parse_args(None, fairness.loop_argv("paddle", plain)).compile
    assert "--compile" not in fairness.dlbench_argv("paddle", plain, Path("s.db"))


def _torch_trainer_optimizer(precision: str) -> torch.optim.Optimizer:
    """The optimizer dlbench's TorchTrainer builds for ResNet-50 at batch 8 on a GPU (CUDA is only a device
    name here: the trainer touches no GPU before a step)."""
    from dlbench.backends.torch.step import TorchTrainer

    model = torch.nn.Linear(4, 4)
    trainer = TorchTrainer(get_case("resnet50"), model, iter(()), torch.device("cuda"),
                           resolve_precision(precision, "cuda"), False, 8)
    return trainer.optimizer


@pytest.mark.filterwarnings("ignore:.*GradScaler is enabled, but CUDA is not available")
@pytest.mark.parametrize(("device", "precision"), [("cuda", "fp32"), ("cuda", "amp"), ("cpu", "fp32")])
def test_fairness_torch_loop_builds_dlbench_optimizer(device: str, precision: str) -> None:
    import torch_loop  # benchmarks/fairness_loops/torch_loop.py (torch only, no dlbench)

    a = fairness.parser().parse_args(["--device", device, "--precision", precision])
    loop_args = loop_common.parse_args(None, fairness.loop_argv("torch", a))
    loop_opt = torch_loop.make_optimizer(list(torch.nn.Linear(4, 4).parameters()), loop_args.optimizer)
    if device == "cuda":
        ours = _torch_trainer_optimizer(precision)
    else:
        from dlbench.backends.torch.step import make_optimizer

        ours = make_optimizer(get_case("resnet50"), torch.nn.Linear(4, 4), 8, fused=False)
    assert type(loop_opt) is type(ours)
    keys = ("lr", "momentum", "weight_decay", "dampening", "nesterov", "fused", "foreach", "maximize", "differentiable")
    assert {k: loop_opt.defaults.get(k) for k in keys} == {k: ours.defaults.get(k) for k in keys}
    buffers = [s.get("momentum_buffer") for s in loop_opt.state.values()]
    assert buffers and all(b is not None and not b.any() for b in buffers)  # zero before the first step
    for state in ours.state.values():  # dlbench's, where it primes them too (gpu-a's fused-SGD fix)
        assert not state["momentum_buffer"].any()


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_fairness_dlbench_side_warms_up_as_the_loop_does(device: str) -> None:
    a = fairness.parser().parse_args(["--device", device, "--warmup", "4", "--steps", "7"])
    argv = fairness.dlbench_argv("torch", a, Path("s.db"))
    opt = dict(itertools.pairwise(argv))
    proto = preset(opt["--preset"]).override(warmup=int(opt["--warmup"]), steps=int(opt["--steps"]),
                                             repeats=int(opt["--repeats"])).on(device)
    assert proto.min_time_s == 0  # no calibration window: dlbench warms up exactly as long as the loop
    loop = loop_common.parse_args(None, fairness.loop_argv("torch", a))
    assert (proto.warmup, proto.steps, proto.repeats) == (loop.warmup, loop.steps, 1)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp"])
def test_fairness_paddle_loop_gets_dlbench_tf32_state_layout_and_flags(precision: str) -> None:
    a = fairness.parser().parse_args(["--device", "cuda", "--precision", precision])
    loop = loop_common.parse_args(None, fairness.loop_argv("paddle", a))
    ours = gpu_defaults.plan("cuda", resolve_precision(precision, "cuda"), False,
                             gpu_defaults.has_nhwc(get_case("resnet50")))
    assert loop.flags == ours.flags  # the TF32 switches (off for fp32) and Paddle's benchmark flags
    assert {loop.flags[f] for f in gpu_defaults.TF32_FLAGS} == {precision == "tf32"}
    assert (loop.layout, loop.amp_level) == (ours.layout, ours.amp_level or "O1")


def test_paddle_cuda_build_without_tf32_flags_refuses_fp32() -> None:
    fp32 = resolve_precision("fp32", "cuda")
    plan = gpu_defaults.plan("cuda", fp32, False, True)
    old = FakePaddleFlags({k: v for k, v in CUDA_BUILD.items() if k not in gpu_defaults.TF32_FLAGS})
    with pytest.raises(Unsupported, match="lacks FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn: it cannot "
                                          "guarantee IEEE fp32"):
        gpu_defaults.apply_flags(plan.flags, old.set_flags, old.get_flags)
    assert "IEEE fp32" in str(gpu_defaults.tf32_missing([], allow_tf32=False))  # refuse() says it before a build
    assert "lacks FLAGS_allow_tf32_cudnn:" in str(gpu_defaults.tf32_missing(["FLAGS_allow_tf32_cublas"], False))
    assert gpu_defaults.tf32_missing(gpu_defaults.TF32_FLAGS, False) is None  # on before the build: it sets them
    stuck = FakePaddleFlags(CUDA_BUILD)
    stuck.set_flags = lambda values: None  # type: ignore[method-assign]  # a build that ignores the switch
    with pytest.raises(Unsupported, match="paddle kept FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn on"):
        gpu_defaults.apply_flags(plan.flags, stuck.set_flags, stuck.get_flags)
    assert gpu_defaults.tf32_problem({"FLAGS_allow_tf32_cublas": False, "FLAGS_allow_tf32_cudnn": False}, False) is None


def test_megengine_turns_tf32_off_on_the_gpu_or_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mge_tf32.TF32_OVERRIDE_VAR, "1")
    package = importlib.reload(importlib.import_module("dlbench.backends.megengine"))  # imports no megengine
    assert "megengine" not in sys.modules
    assert os.environ[mge_tf32.TF32_OVERRIDE_VAR] == "0" and package.__doc__
    assert mge_tf32.fp32_problem("cuda", mge_tf32.override_state(os.environ)) is None
    assert mge_tf32.tf32_in_use("cuda", "0") is False
    for state in ("1", "unset"):
        assert mge_tf32.tf32_in_use("cuda", state)
        assert f"NVIDIA_TF32_OVERRIDE is {state!r}" in str(mge_tf32.fp32_problem("cuda", state))
        assert mge_tf32.fp32_problem("cpu", state) is None  # no TF32 on a CPU
