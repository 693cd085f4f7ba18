"""The backends' GPU code paths, checked on the CPU with NVML and CUDA mocked only at their boundaries (pynvml,
torch.cuda's answers): fused optimizers that skip a step (torch's real fused CPU kernels, torch 2.4+), out-of-memory
classification, GPU builds without kernels for the GPU, TF32 flags, and host syncs per step."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

import pytest

from dlbench.cases import get_case
from dlbench.numerics import LOSS_SCALE_INIT, resolve_precision
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from tests.support.paths import REPO

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
    return TorchTrainer(
        case,
        model,
        iter(batches),
        torch.device("cpu"),
        resolve_precision("amp", "cuda"),
        compile_model=False,
        global_batch=256,
        fused=fused,
    )


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
    assert fused.scaler is not None and fused.scaler.get_scale() == LOSS_SCALE_INIT / 2  # found inf: skipped
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
    from dlbench import worker
    from dlbench.backends.gpu_arch import GpuBuild, cuda_version, refusal
    from tests.support.nvml_machine import FakeGpu, install

    assert [cuda_version(t) for t in ("mxnet-cu112", "0.9.0+cu117", "11070", "12.6", "mxnet")] == [
        "11.2",
        "11.7",
        "11.7",
        "12.6",
        "",
    ]
    for build in (
        GpuBuild("mxnet", "11.2", (), "the distribution mxnet-cu112"),
        GpuBuild("oneflow", "11070", (), "oneflow's flags.cuda_version()"),
    ):
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
    spec = PointSpec(
        framework="torch", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"), device="cuda"
    )
    result = worker.run(spec, RankContext())
    assert result.status == "unsupported", result
    assert result.error == (
        "torch's build has no kernels for this GPU (NVIDIA H100 80GB HBM3, sm_90) "
        "(torch.cuda.get_arch_list(): sm_50, sm_60, sm_70, sm_75, sm_80, sm_86): install a "
        "build for sm_90"
    )


# Out-of-memory failures as CUDA's libraries word them, the way each framework re-raises them.
NEAR_OOM = [
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    (
        "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled cuda error (run with NCCL_DEBUG=INFO "
        "for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
        "Cuda failure 'out of memory'"
    ),
    "NCCL WARN Cuda failure 2 'out of memory'",
    "INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA runtime error: cudaErrorMemoryAllocation",
]
NOT_OOM = [
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "NCCL error: unhandled system error",
    "no kernel image is available",
]


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

    path = REPO / "benchmarks" / "fairness_loops" / "torch_loop.py"
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


def test_face_and_wide_deep_host_sync_per_step() -> None:
    """The torch face step reads nothing on the host (no nonzero/unique/.item() mid-step, which wait for the GPU
    every step), full classifier and Partial FC alike: run under torch's FakeTensorMode, where any such read
    raises. Wide & Deep's sparse tables train with torch's own SparseAdam, whose per-step host sync is torch's:
    recorded on the point (absent on the dense path)."""
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlbench.backends.torch.backend import SPARSE_ADAM_SYNC, TorchBackend
    from dlbench.backends.torch.face import FaceModel, arcface_loss

    for sample in (100, 50):  # the whole classifier; Partial FC, half the classes
        case = get_case("face").configured({"classes": 12, "model_parallel": 1, "sample": sample})
        case = dataclasses.replace(case, arch=dataclasses.replace(case.arch, embedding=8))  # type: ignore[arg-type]
        model = FaceModel(case, torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 8)))
        with FakeTensorMode(allow_non_fake_inputs=True):
            batch = {"images": torch.randn(6, 3, 4, 4), "labels": torch.tensor([0, 5, 11, 3, 7, 5])}
            arcface_loss(model, batch).backward()  # raises on a data-dependent (host) read
    backend = TorchBackend()
    for sparse, fact in ((1, SPARSE_ADAM_SYNC), (0, None)):
        spec = PointSpec(
            framework="torch",
            model="wide_deep",
            batch_size=2,
            protocol=Protocol(0, 1, 1, "median"),
            case_params=(("sparse", sparse), ("vocab", 64)),
        )
        backend.build(spec, get_case("wide_deep").configured(spec.params), RankContext()).close()
        assert backend.facts().get("host_sync_per_step") == fact


def test_the_bert_attention_probe_runs_and_cannot_fail_a_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """#40: BERT's one GPU-only call (SDPAParams with can_use_flash/efficient_attention) runs here with torch's real
    functions on BERT-base's query shape (on CPU tensors they accept no fused kernel); and where the probe fails
    (an API this torch lacks, or here no CUDA device at all) the point's attention fact says "unknown" and the
    build goes on."""
    torch = _torch()
    import torch.backends.cuda as sdpa

    from dlbench.backends.torch.models import attention_kernels, fused_attention_kernels

    case = get_case("bert_base")
    q = torch.empty(1, 12, 128, 64, dtype=torch.bfloat16)
    assert fused_attention_kernels(q, None, 0.1) == []
    assert fused_attention_kernels(q, torch.ones(1, 1, 1, 128, dtype=torch.bool), 0.1) == []
    gpu = torch.device("cuda")  # no CUDA here: making the probe's tensors fails
    fact = attention_kernels(case, 128, False, gpu, torch.bfloat16)
    assert fact.startswith("scaled_dot_product_attention, no mask (every token real); fused kernels it accepts: un")
    monkeypatch.setattr(torch, "empty", lambda *a, **k: q)  # the tensors made here; then the API missing
    monkeypatch.setattr(torch, "ones", lambda *a, **k: torch.zeros(1, 1, 1, 128, dtype=torch.bool))
    monkeypatch.delattr(sdpa, "SDPAParams")
    fact = attention_kernels(case, 128, True, gpu, torch.bfloat16)
    assert "boolean padding mask; fused kernels it accepts: unknown (ImportError" in fact
