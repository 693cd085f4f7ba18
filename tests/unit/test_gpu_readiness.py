"""Issue 21, "the first GPU run must give right numbers": one CPU test per defect a second read of the GPU paths
found. NVML and CUDA are mocked only at their boundaries (pynvml, torch.cuda's answers); the torch optimizer
tests run torch's real fused kernels, which torch 2.4+ has on the CPU too."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util

# telemetry's tests (below) need these
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml
import pytest
from fake_pynvml import gpus, install, proc

from dlbench.cases import get_case
from dlbench.launch.watch import PointWatch
from dlbench.numerics import resolve_precision
from dlbench.report.telemetry import telemetry_notes
from dlbench.machine.gpu_watch import UNKNOWN_CONTAINER, GpuSampler, rank_devices
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.machine.telemetry import Telemetry, with_telemetry
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import CONTROLLER_MEMORY, WATCHER_VAR, RankContext, WorkerResult, watcher_token

if TYPE_CHECKING:
    import torch

    from dlbench.backends.torch.step import TorchTrainer


def _torch() -> Any:
    """torch, imported by the tests that use it (the other tests of this file need no framework)."""
    return pytest.importorskip("torch")

# ---------------------------------------------------------------------------------------------- gpu-a's tests


def _trainer(optimizer: str, fused: bool, batches: list[dict[str, torch.Tensor]]) -> TorchTrainer:
    """dlbench's TorchTrainer in amp (float16 autocast, a GradScaler) for an image case whose optimizer is the
    named case's (resnet50: SGD momentum 0.9 + weight decay; bert_base: Adam; gpt2_small: AdamW), on a tiny
    model, fused or not, on the CPU."""
    torch = _torch()
    from dlbench.backends.torch.step import TorchTrainer

    owner = {"sgd": "resnet50", "adam": "bert_base", "adamw": "gpt2_small"}[optimizer]
    case = dataclasses.replace(get_case("resnet50"), optimizer=get_case(owner).optimizer)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 10))
    return TorchTrainer(case, model, iter(batches), torch.device("cpu"), resolve_precision("amp", "cuda"),
                        compile_model=False, global_batch=256, fused=fused)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_fused_optimizer_skipped_step(optimizer: str) -> None:
    """A first step whose fp16 gradients overflow (the GradScaler finds inf, as at ResNet-50's start) leaves the
    weights as they were and the fused optimizer's state as a never-stepped one's (zeros); the next step then
    equals the unfused optimizer's. Torch's real fused kernels on the CPU. Tolerance: 1 float32 ulp-scale (rtol 1e-6), since the
    fused kernel may contract the update into one FMA where the unfused one rounds twice."""
    torch = _torch()
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([1, 7])
    overflow = {"images": torch.full((2, 3, 4, 4), 1e38), "labels": labels}  # inf in float16 autocast
    normal = {"images": torch.randn(2, 3, 4, 4, generator=g), "labels": labels}
    fused = _trainer(optimizer, True, [overflow, normal])
    plain = _trainer(optimizer, False, [overflow, normal])
    assert fused.optimizer.defaults.get("fused") is True and not plain.optimizer.defaults.get("fused")
    weights = [p.detach().clone() for p in fused.model.parameters()]
    for p in weights:  # leave freed, non-zero memory of the parameters' sizes for an uninitialised buffer to take
        torch.full_like(p, 3e38).sum()
    fused.train_step(fused.next_batch())
    assert fused.scaler is not None and fused.scaler.get_scale() == 32768.0  # the step found inf and was skipped
    for before, p in zip(weights, fused.model.parameters()):
        assert torch.equal(before, p.detach())
    state = fused.optimizer.state_dict()["state"]
    assert len(state) == len(weights)
    for entry in state.values():  # what a never-stepped optimizer holds: zero momentum, moments and step count
        for name, value in entry.items():
            assert not torch.as_tensor(value).any(), (name, value)
    fused.train_step(fused.next_batch())
    for _ in range(2):  # the unfused optimizer: skipped by the scaler's host check, then the same normal step
        plain.train_step(plain.next_batch())
    for a, b in zip(fused.model.parameters(), plain.model.parameters()):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0.0)


def test_torch_oom_check_without_torch_out_of_memory_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch < 2.5 has no torch.OutOfMemoryError (the extra allowed 2.1): the OOM check, which runs inside the
    worker's `except`, still classifies (torch.cuda.OutOfMemoryError, the messages) instead of raising an
    AttributeError that would lose the point; and a classifier that fails anyway leaves an `error` result."""
    torch = _torch()
    import dlbench.backends.torch.backend as torch_backend
    from dlbench import worker
    from dlbench.backends.fake import FakeBackend
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    monkeypatch.delattr(torch, "OutOfMemoryError")
    try:
        backend = importlib.reload(torch_backend).TorchBackend()
        assert backend.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        assert backend.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        assert not backend.is_oom(ValueError("mat1 and mat2 shapes cannot be multiplied"))
    finally:
        monkeypatch.undo()
        importlib.reload(torch_backend)

    def broken(self: object, exc: BaseException) -> bool:
        raise AttributeError("module 'torch' has no attribute 'OutOfMemoryError'")

    monkeypatch.setattr(FakeBackend, "is_oom", broken)
    monkeypatch.setenv("DLBENCH_FAKE", "raise")
    spec = PointSpec(framework="fake", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"))
    result = worker.run(spec, RankContext())
    assert result.status == "error" and "fake failure" in (result.error or "")


H100 = "NVIDIA H100 80GB HBM3"


def test_gpu_build_without_kernels_for_the_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build with no kernels for this GPU's compute capability is refused before build, in one line:
    torch's arch list (CUDA mocked at torch.cuda's answers) on an H100 that NVML reports (pynvml mocked), and
    the builds that cannot list theirs by the CUDA version they were built with (mxnet-cu112, OneFlow's
    CUDA 11.7 wheel with cuDNN 8.5)."""
    torch = _torch()
    from test_nvml import FakeGpu, install

    from dlbench import worker
    from dlbench.backends.gpu_arch import GpuBuild, cuda_version, refusal
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    assert [cuda_version(t) for t in ("mxnet-cu112", "0.9.0+cu117", "11070", "12.6", "mxnet")] == \
        ["11.2", "11.7", "11.7", "12.6", ""]
    for build in (GpuBuild("mxnet", "11.2", (), "the distribution mxnet-cu112"),
                  GpuBuild("oneflow", "11070", (), "oneflow's flags.cuda_version()")):
        why = refusal("9.0", H100, build)
        assert why is not None and "up to sm_86" in why and "CUDA 11.8 or newer" in why and "\n" not in why
        assert refusal("8.6", "NVIDIA A10", build) is None and refusal("8.9", "NVIDIA L4", build) is None
    ampere = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86")
    assert refusal("8.9", "NVIDIA L40S", GpuBuild("torch", "11.7", ampere, "x")) is None  # sm_86 code runs on 8.9
    assert "only PTX" in str(refusal("9.0", H100, GpuBuild("torch", "12.1", (*ampere, "compute_86"), "x")))
    assert refusal("9.0", H100, GpuBuild("torch", "12.1", (*ampere, "sm_90"), "x")) is None
    assert refusal("9.0", H100, GpuBuild("tf", "12.5", ("sm_90a",), "x")) is None
    assert refusal("10.0", "NVIDIA B200", GpuBuild("tf", "12.5", ("sm_90a",), "x")) is not None

    install(monkeypatch, [FakeGpu(H100, "GPU-aaaa-0000")])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "11.7")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(ampere))
    spec = PointSpec(framework="torch", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"),
                     device="cuda")
    result = worker.run(spec, RankContext())
    assert result.status == "unsupported", result
    assert result.error == ("torch's build has no kernels for this GPU (NVIDIA H100 80GB HBM3, sm_90) "
                            "(torch.cuda.get_arch_list(): sm_50, sm_60, sm_70, sm_75, sm_80, sm_86): install a "
                            "build for sm_90")


# Out-of-memory failures as CUDA's libraries word them, the way each framework re-raises them.
NEAR_OOM = [
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ("NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled cuda error (run with NCCL_DEBUG=INFO "
     "for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
     "Cuda failure 'out of memory'"),
    "NCCL WARN Cuda failure 2 'out of memory'",
    "INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA runtime error: cudaErrorMemoryAllocation",
]
NOT_OOM = ["cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
           "CUDNN_STATUS_INTERNAL_ERROR", "NCCL error: unhandled system error", "no kernel image is available"]


def test_library_out_of_memory_errors_are_oom() -> None:
    """Near-OOM failures that arrive as cuDNN, cuBLAS, NCCL or CUDA runtime errors read as `oom` (so the max-batch
    search calls the batch too big), through torch's backend (its NCCL DistBackendError included) and the rule
    every backend shares; other library errors stay errors."""
    torch = _torch()
    from dlbench.backends.fake import FakeBackend
    from dlbench.backends.torch.backend import TorchBackend

    for backend in (TorchBackend(), FakeBackend()):
        for text in NEAR_OOM:
            assert backend.is_oom(RuntimeError(text)), (backend.name, text)
        for text in NOT_OOM:
            assert not backend.is_oom(RuntimeError(text)), (backend.name, text)
    nccl = torch.distributed.DistBackendError(NEAR_OOM[2])
    try:  # wrapped, as a collective inside a compiled step re-raises it
        raise RuntimeError("during the all-reduce") from nccl
    except RuntimeError as outer:
        assert TorchBackend().is_oom(outer)


def test_torch_tf32_legacy_flags_guarded() -> None:
    """torch >= 2.9 refuses a mix of its legacy allow_tf32 flags and the fp32_precision API; dlbench's torch
    backend and its bare torch fairness loop both set TF32 through the API this torch has, to the same state
    (read back through the new API and dlbench's reader), whatever was set before."""
    torch = _torch()

    from dlbench.backends.torch.backend import set_tf32, tf32_state

    path = Path(__file__).parents[2] / "benchmarks" / "fairness_loops" / "torch_loop.py"
    loaded = importlib.util.spec_from_file_location("dlbench_torch_loop", path)
    assert loaded is not None and loaded.loader is not None
    loop = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(loop)
    b = torch.backends
    switches = (b.cuda.matmul, b.cudnn.conv, b.cudnn.rnn)
    before = [s.fp32_precision for s in switches]
    try:
        for allow in (False, True):
            for setter in (set_tf32, loop.set_tf32):
                for s in switches:  # start from the other state
                    s.fp32_precision = "ieee" if allow else "tf32"
                setter(allow)
                want = "tf32" if allow else "ieee"
                assert [s.fp32_precision for s in switches] == [want] * 3, (setter.__module__, allow)
                assert tf32_state() == {"tf32_matmul": str(allow), "tf32_conv": str(allow)}
    finally:
        for s, value in zip(switches, before):
            s.fp32_precision = value


JAX_GPU_SETUP = """
import json, os
from types import SimpleNamespace
import pynvml
GPUS = ["GPU-aaaa-0000", "GPU-bbbb-1111"]  # NVML at its boundary: two H100s
for name, fn in {"nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: 2,
                 "nvmlDeviceGetHandleByIndex": lambda i: GPUS[i], "nvmlDeviceGetUUID": lambda h: h,
                 "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3", "nvmlSystemGetDriverVersion": lambda: "580",
                 "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 << 30, used=1 << 30),
                 "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0)}.items():
    setattr(pynvml, name, fn)
import dlbench.backends.jax  # sets XLA's variables before jax starts
from jax._src import xla_bridge
from jaxlib import xla_client
from dlbench.backends.base import Unsupported
from dlbench.backends.jax.backend import JaxBackend
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

options = xla_client.generate_pjrt_gpu_plugin_options()  # what jaxlib hands the CUDA plugin
out = {"fraction": options.get("memory_fraction"), "preallocate": options.get("preallocate")}
os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.5"
try:
    xla_client.generate_pjrt_gpu_plugin_options()
    out["both"] = "accepted"
except ValueError as exc:
    out["both"] = str(exc)
del os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"]
spec = PointSpec(framework="jax", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"), device="cuda")
try:  # rank 1 of a node: GPU 1 of the two (a CPU jaxlib then has no GPU backend: Unsupported)
    JaxBackend().build(spec, get_case("alexnet"), RankContext(local_rank=1, local_world_size=2))
except Unsupported:
    pass
out["visible_devices"] = xla_bridge._options_from_jax_configs("cuda").get("visible_devices")

# fp16: dlbench's jitted step over a tiny module (the case's loss and optimizer), twice: how often it compiled.
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from dlbench.backends.jax.distributed import Placement
from dlbench.backends.jax.step import State, loss_scale, make_optimizer, make_train_step

class Tiny(nn.Module):
    @nn.compact
    def __call__(self, images, train=True):
        return nn.Dense(10, dtype=jnp.float16)(images.reshape((images.shape[0], -1)))

case = get_case("resnet50")
where = Placement.over(jax.devices("cpu")[:1])
params = Tiny().init(jax.random.PRNGKey(0), jnp.zeros((2, 4, 4, 3)))["params"]
state = where.replicate(State.create(apply_fn=Tiny().apply, params=params, tx=make_optimizer(case, 2), batch_stats={},
                                     key=jax.random.PRNGKey(1), dynamic_scale=loss_scale(jnp.float16)))
batch = where.shard({"images": np.ones((2, 4, 4, 3), np.float32), "labels": np.array([1, 2], np.int32)})
step = make_train_step(case, where)
for _ in range(3):
    state, loss = step(state, batch)
out["fp16_compiles"] = step._cache_size()
out["fp16_loss"] = float(loss)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def jax_gpu_setup() -> dict[str, Any]:
    """What the JAX backend hands XLA's CUDA plugin (memory options, visible devices), from a script in the jax
    environment with NVML faked at pynvml; skipped, naming it, where that environment is absent."""
    import json
    import os
    import subprocess

    import dlbench
    from dlbench.envs import venvs
    from dlbench.envs.interpreters import NotInstalled, interpreter_for

    try:
        python = interpreter_for("jax")
    except NotInstalled as exc:  # one set up from another checkout also runs this one's code (PYTHONPATH below)
        record = venvs.get("jax")
        if record is None or not Path(record.python).exists():
            pytest.skip(f"jax environment absent: {exc}")
        python = record.python
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE",
                        "CUDA_VISIBLE_DEVICES")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(dlbench.__file__).parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([python, "-c", JAX_GPU_SETUP], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def test_jax_memory_fraction(jax_gpu_setup: dict[str, Any]) -> None:
    """XLA's allocator caps JAX at 75% of a GPU even without preallocation: the backend raises the cap to 0.95
    through XLA_CLIENT_MEM_FRACTION, the name the installed jaxlib reads (it refuses it together with the
    deprecated XLA_PYTHON_CLIENT_MEM_FRACTION, so a fraction the user set under either name is kept alone)."""
    from dlbench.backends.jax import gpu_memory_env, memory_fraction_fact

    assert jax_gpu_setup["fraction"] == 0.95 and jax_gpu_setup["preallocate"] is False
    assert "specified together" in jax_gpu_setup["both"]
    ours: dict[str, str] = {}
    gpu_memory_env(ours)
    assert ours == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.95"}
    assert memory_fraction_fact(ours) == "0.95 (XLA_CLIENT_MEM_FRACTION)"
    for user in ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, {"XLA_CLIENT_MEM_FRACTION": "0.6"},
                 {"XLA_CLIENT_MEM_FRACTION": "0.6", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}):
        environ = dict(user)
        gpu_memory_env(environ)
        assert environ == user  # never a second fraction variable, never the user's preallocation changed
    assert memory_fraction_fact({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}) == "0.5 (XLA_PYTHON_CLIENT_MEM_FRACTION)"


def test_jax_fp16_step_compiles_once(jax_gpu_setup: dict[str, Any]) -> None:
    """JAX fp16 traced its step again on step 2 (flax's loss-scale counters start as weak-typed Python numbers and
    come back strong-typed), inside the measured steps of a max-batch probe with one warm-up step: dlbench's
    jitted fp16 step now compiles once over three steps."""
    import math

    assert jax_gpu_setup["fp16_compiles"] == 1 and math.isfinite(jax_gpu_setup["fp16_loss"])


def test_jax_sees_only_its_gpu(jax_gpu_setup: dict[str, Any]) -> None:
    """A single-process JAX worker hands XLA's CUDA plugin only its own GPU (rank 1 of two: GPU 1), so no context
    starts on the others."""
    assert jax_gpu_setup["visible_devices"] == [1]


def test_peak_table_v100s_and_mig_slices() -> None:
    """V100S has its own row (16.4 fp32 / 130 fp16 TFLOP/s, not the V100 PCIe's 14 / 112); a MIG slice gets its
    profile's share of its card's compute (1g of 7 on an H100), and a card in MIG mode under a name without a
    profile (no CUDA_VISIBLE_DEVICES=MIG-...) gets no peak, never the whole card's: MFU reads unknown, saying so."""
    from dlbench.protocol.stats import summarize
    from dlbench.analysis.mfu import efficiency
    from dlbench.machine.peaks import gpu_peak
    from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
    from dlbench.spec import PointSpec, Protocol

    v100s = {m: gpu_peak("Tesla V100S-PCIE-32GB", m).peak for m in ("fp32", "fp16")}
    assert {m: (p.tflops, p.device) for m, p in v100s.items() if p} == {"fp32": (16.4, "V100S PCIe"),
                                                                         "fp16": (130.0, "V100S PCIe")}
    assert v100s["fp32"] is not None and v100s["fp32"].source.startswith("https://")
    pcie = gpu_peak("Tesla V100-PCIE-32GB", "fp32").peak
    assert pcie is not None and pcie.tflops == 14.0
    for name, mode, share in (("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", 989.5 / 7),
                              ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "tf32", 156.0 * 3 / 7),
                              ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "fp16", 312.0 / 7)):
        found = gpu_peak(name, mode).peak
        assert found is not None and found.tflops == pytest.approx(share) and "/7 of its compute" in found.device, name
    whole = gpu_peak(H100, "bf16", mig="on")
    assert whole.peak is None and "MIG is on" in whole.reason and "CUDA_VISIBLE_DEVICES=MIG-" in whole.reason
    assert gpu_peak("NVIDIA L40S MIG 1g.12gb", "fp32").peak is None  # a card the table gives no MIG slices

    spec = PointSpec(framework="mxnet", model="resnet50", batch_size=64, protocol=Protocol(1, 4, 2, "median"),
                     device="cuda")
    ranks = (RankRaw(0, tuple(RepeatRaw((0.1,) * 4, 0.4) for _ in range(2))),)
    env = Environment(identity={"device": "cuda", "device_model": H100, "math_mode": "fp32"},
                      descriptive={"gpu_mig": "on", "hostname": "gpu-box"})
    eff = efficiency(PointResult(spec, "ok", ranks, summarize(spec, ranks), env))
    assert eff.achieved_tflops is not None and eff.mfu is None and "MIG is on" in eff.note


def test_max_batch_cache_keyed_on_the_probes_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The max-batch cache keys each probe on the device its worker reported (NVML's name of the rank's GPU,
    `rank_gpu`), not the controller's: a search placed by Slurm from a GPU-less login node on an H100 does not
    reuse the probes an earlier search ran on an A100; the same search again reuses its own (all but the first
    probe, whose worker says where the search runs)."""
    from test_nvml import FakeGpu, install

    from dlbench import worker
    from dlbench.backends.fake import FakeBackend
    from dlbench.launch.registry import Launchers
    from dlbench.analysis.record import point_result
    from dlbench.records import RankRaw, RepeatRaw
    from dlbench.store.store import Store
    from dlbench.spec import PointSpec, Protocol
    from dlbench.suite import maxbatch
    from dlbench.wire import RANK_GPU, RankContext, WorkerResult

    a100 = "NVIDIA A100-SXM4-80GB"
    install(monkeypatch, [FakeGpu(a100, "GPU-aaaa-0000"), FakeGpu(H100, "GPU-bbbb-1111")])  # pynvml's answers
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    base = PointSpec(framework="fake", model="resnet50", batch_size=1, protocol=Protocol(1, 1, 1, "median"),
                     device="cuda", launcher="slurm")
    env = worker._environment(FakeBackend(), base, RankContext(local_rank=1, local_world_size=2))
    assert env[RANK_GPU] == H100 and env["device_model"] == H100  # rank 1's GPU, as its worker sees it

    node: dict[str, Any] = {"gpu": a100, "fits": 37}  # the compute node Slurm places the probes on

    def on_node(spec: PointSpec, launchers: Launchers, python: str, on_progress: object = None) -> PointResult:
        fits = spec.batch_size <= node["fits"]
        steps = spec.protocol.steps
        ranks = [RankRaw(0, (RepeatRaw((0.01,) * steps, 0.01 * steps),))] if fits else []
        reported = WorkerResult(status="ok" if fits else "oom", error=None if fits else "CUDA out of memory",
                                ranks=ranks, env={RANK_GPU: str(node["gpu"]), "device_model": str(node["gpu"])})
        return point_result(spec, reported.status, reported, reported.error, [], 0.0)

    monkeypatch.setattr(maxbatch, "execute", on_node)
    store = Store(tmp_path / "s.db")
    on_a100 = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert on_a100.max_batch == 37 and on_a100.exact
    node.update(gpu=H100, fits=50)
    on_h100 = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert on_h100.max_batch == 50 and on_h100.exact and not any(p.cached for p in on_h100.probes)
    again = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert again.max_batch == 50 and again.new_probes == 1 and again.probes[0].value == 1


def _calibrating_rank(rank: int, port: int) -> tuple[str, str | None, list[int], str | None]:
    """One of two gloo ranks running a torch point through the worker, its own calibration made to differ from
    the other rank's (rank 1 counts 3 steps more): the agreed count must be rank 0's."""
    import os

    from dlbench import worker
    from dlbench.protocol import runner
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import configure_rank

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    own = runner.calibrated_steps
    runner.calibrated_steps = lambda t, p, c: own(t, p, c) + 2 + 3 * rank  # type: ignore[assignment]
    # A minimum measured time given explicitly applies on the CPU too (the GPU presets' 2 s stands in).
    spec = PointSpec(framework="torch", model="wide_deep", batch_size=2, devices_per_node=2, threads=1,
                     protocol=Protocol(warmup=0, steps=1, repeats=1, statistic="median", min_time_s=0.05),
                     case_params=(("vocab", 64),))
    result = worker.run(spec, configure_rank(spec, os.environ))
    steps = [sum(r.window_steps) for rr in result.ranks for r in rr.repeats]
    raised = result.facts.get("steps_raised")
    return result.status, result.error, steps, None if raised is None else str(raised)


def test_multi_rank_calibration_takes_rank_zeros_steps() -> None:
    """Several ranks calibrate too (a multi-GPU `quick` point measured 5 steps, 0.3-0.5 s, not the 2 s promised):
    rank 0 decides the step count and the other ranks follow through the framework's collective (torch: a
    broadcast over the process group), here 2 gloo ranks on the CPU whose own counts differ."""
    import concurrent.futures
    import socket

    torch = _torch()
    importlib.import_module("torch._dynamo")  # torch.optim imports it for its first optimizer: once, not per rank
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    fork = torch.multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=fork) as ranks:
        running = [ranks.submit(_calibrating_rank, rank, port) for rank in range(2)]
        (status0, error0, steps0, raised0), (status1, error1, steps1, raised1) = [r.result(240) for r in running]
    assert (status0, status1) == ("ok", "ok"), (error0, error1)
    assert steps0 == steps1 and steps0[0] >= 3  # rank 0's count (its own + 2), not rank 1's (its own + 5)
    assert raised0 == raised1 and raised0 is not None and raised0.startswith(f"1 -> {steps0[0]} ")


def test_face_and_wide_deep_host_sync_per_step() -> None:
    """The torch face step reads nothing on the host (no nonzero/unique/.item() mid-step, which wait for the GPU
    every step), full classifier and Partial FC alike: run under torch's FakeTensorMode, where any such read
    raises. Wide & Deep's sparse tables train with torch's own SparseAdam, whose per-step host sync is torch's:
    recorded on the point (absent on the dense path)."""
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlbench.backends.torch.backend import SPARSE_ADAM_SYNC, TorchBackend
    from dlbench.backends.torch.face import FaceModel, arcface_loss
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    for sample in (100, 50):  # the whole classifier; Partial FC, half the classes
        case = get_case("face").configured({"classes": 12, "model_parallel": 1, "sample": sample})
        case = dataclasses.replace(case, arch=dataclasses.replace(case.arch, embedding=8))  # type: ignore[arg-type]
        model = FaceModel(case, torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 8)))
        with FakeTensorMode(allow_non_fake_inputs=True):
            batch = {"images": torch.randn(6, 3, 4, 4), "labels": torch.tensor([0, 5, 11, 3, 7, 5])}
            arcface_loss(model, batch).backward()  # raises on a data-dependent (host) read
    backend = TorchBackend()
    for sparse, fact in ((1, SPARSE_ADAM_SYNC), (0, None)):
        spec = PointSpec(framework="torch", model="wide_deep", batch_size=2, protocol=Protocol(0, 1, 1, "median"),
                         case_params=(("sparse", sparse), ("vocab", 64)))
        backend.build(spec, get_case("wide_deep").configured(spec.params), RankContext()).close()
        assert backend.facts().get("host_sync_per_step") == fact


def test_validate_oom_step_is_too_big_for_memory_only() -> None:
    """benchmarks/gpu/validate.sh step 6 must fail for memory alone: its batch's ResNet-50 fp32 activations
    (about 100 MB an image) pass an H200's 141 GB, while its largest tensor (64 x 112 x 112 = 256 x 56 x 56 values
    an image) stays under 2^31 elements (8192 made 6.6e9); the run and its check name the same batch."""
    import re

    script = (Path(__file__).parents[2] / "benchmarks" / "gpu" / "validate.sh").read_text(encoding="utf-8")
    step = script[script.index('say "6.'):script.index('say "7.')]
    given = re.search(r'db run .* -b "?(\$?\w+)"?', step)
    assert given is not None
    name = given.group(1)
    if name.startswith("$"):  # a shell variable set above the step
        value = re.search(rf"^{name[1:]}=(\d+)$", script, re.MULTILINE)
        assert value is not None
        name = value.group(1)
    batch = int(name)
    assert f'check "batch {given.group(1)} is oom"' in step
    assert batch * 64 * 112 * 112 < 2**31
    assert batch * 100e6 > 141e9


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
from dlbench.store.store import Store
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
