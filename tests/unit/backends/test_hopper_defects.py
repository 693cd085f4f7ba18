"""What the first run on a Hopper GPU would have got wrong (issue #28), each shown on this CPU with the framework's
real kernels and NVML or CUDA mocked only at their boundary: PTX of the GPU's own major version, the legacy TF32
getters after the fp32_precision API, cuDNN's "no valid algorithm" near the memory limit, GradScaler's first
steps, BERT's attention mask, the peak table's new names, and a driver older than the torch build."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dlbench.backends import cudnn_fallback
from dlbench.backends.cuda_driver import no_device_reason
from dlbench.backends.gpu_arch import JIT_CACHE_BYTES, GpuBuild, ptx_jit, rank_ptx_jit, refusal
from dlbench.machine.peaks import gpu_peak
from dlbench.numerics import LOSS_SCALE_INIT, resolve_precision
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from tests.support.fake_pynvml import FakeGpu, install
from tests.support.paths import REPO

H100 = "NVIDIA H100 80GB HBM3"
# TensorFlow 2.x's official CUDA wheels: SASS up to sm_89 and PTX for compute_90 (its build info's
# cuda_compute_capabilities).
TF_ARCHS = ("sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "compute_90")


def _torch() -> Any:
    """torch (the main venv's CPU build), imported by the tests that use it."""
    return pytest.importorskip("torch")


def _torch_loop() -> Any:
    """benchmarks/fairness_loops/torch_loop.py, the bare fairness loop, as a module."""
    sys.path.insert(0, str(REPO / "benchmarks" / "fairness_loops"))
    path = REPO / "benchmarks" / "fairness_loops" / "torch_loop.py"
    spec = importlib.util.spec_from_file_location("torch_loop_for_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------------------ PTX


def test_ptx_of_the_gpus_own_major_version_runs_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """TF's sm_60..sm_89 + compute_90 build runs on an H100 (the driver JIT-compiles the PTX once): not refused,
    and the fact says so with the JIT cache raised; on a Blackwell GPU (10.0) the same build stays refused."""
    tf = GpuBuild("tf", "12.5.1", TF_ARCHS, "tf.sysconfig.get_build_info()")
    assert refusal("9.0", H100, tf) is None
    fact = ptx_jit("9.0", tf)
    assert fact is not None and "compute_90" in fact and "JIT" in fact and str(JIT_CACHE_BYTES) in fact
    assert ptx_jit("9.0", GpuBuild("torch", "12.1", ("sm_80", "sm_90"), "x")) is None  # machine code: no JIT
    assert refusal("10.0", "NVIDIA B200", tf) is not None and ptx_jit("10.0", tf) is None
    assert refusal("9.0", H100, GpuBuild("torch", "12.1", ("sm_80", "compute_86"), "x")) is not None  # older major

    install(monkeypatch, [FakeGpu("GPU-h100-0", name=H100)])
    monkeypatch.delenv("CUDA_CACHE_MAXSIZE", raising=False)
    assert rank_ptx_jit(tf, RankContext()) == fact
    assert os.environ["CUDA_CACHE_MAXSIZE"] == str(JIT_CACHE_BYTES)


# ----------------------------------------------------------------------------------------------------------- TF32


@pytest.fixture
def tf32_restored() -> Iterator[Any]:
    """torch's TF32 settings as they were before the test (the new API's values, which always read)."""
    torch = _torch()
    saved = (
        (
            torch.backends.fp32_precision,
            torch.backends.cuda.matmul.fp32_precision,
            torch.backends.cudnn.fp32_precision,
            torch.backends.cudnn.conv.fp32_precision,
            torch.backends.cudnn.rnn.fp32_precision,
        )
        if hasattr(torch.backends, "fp32_precision")
        else None
    )
    yield torch
    if saved is not None:
        (
            torch.backends.fp32_precision,
            torch.backends.cuda.matmul.fp32_precision,
            torch.backends.cudnn.fp32_precision,
            torch.backends.cudnn.conv.fp32_precision,
            torch.backends.cudnn.rnn.fp32_precision,
        ) = saved


def _legacy_getters(torch: Any) -> dict[str, object]:
    """What Inductor reads on CUDA paths: each legacy getter (raises "mix of the legacy and new APIs" when only
    the new API was set)."""
    return {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def test_new_api_alone_breaks_the_legacy_getters(tf32_restored: Any) -> None:
    """The defect, reproduced on this torch: setting only the fp32_precision values makes the legacy getters
    raise (so this test shows what the two fixes below guard against). It runs in a fresh interpreter: torch
    remembers in-process which API was used first, so an earlier test's set_tf32 would hide it."""
    torch = tf32_restored
    if not hasattr(torch.backends, "fp32_precision"):
        pytest.skip(f"torch {torch.__version__} has no fp32_precision API")
    code = (
        "import torch\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "torch.backends.cudnn.conv.fp32_precision = 'tf32'\n"
        "torch.backends.cuda.matmul.allow_tf32\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0 and "mix of the legacy and new APIs" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("where", ["dlbench", "bare loop"])
def test_legacy_tf32_getters_read_after_every_mode(tf32_restored: Any, where: str) -> None:
    """After dlbench's set_tf32 and the bare fairness loop's, in every order of modes, each legacy getter reads
    and agrees with the mode, and dlbench reads the mode back."""
    torch = tf32_restored
    from dlbench.backends.torch.backend import set_tf32, tf32_state

    setter = set_tf32 if where == "dlbench" else _torch_loop().set_tf32
    for allow in (True, False, True, False):
        setter(allow)
        got = _legacy_getters(torch)
        assert got == {
            "matmul.allow_tf32": allow,
            "cudnn.allow_tf32": allow,
            "float32_matmul_precision": "high" if allow else "highest",
        }, (allow, got)
        assert tf32_state() == {"tf32_matmul": str(allow), "tf32_conv": str(allow)}


# ----------------------------------------------------------------------------------------------------------- cuDNN

NO_ALGORITHM = "Unable to find a valid cuDNN algorithm to run convolution"


class _CudnnBackend:
    """A backend double over the fake one: its build fails with cuDNN's "no valid algorithm" while autotuning is
    on (or always, with `always`), on a device `used` full."""

    def __new__(cls, always: bool, used: float) -> Any:
        from dlbench.backends.fake import FakeBackend

        class Backend(FakeBackend):
            autotune = True
            builds = 0

            def build(self, spec: PointSpec, case: Any, ctx: RankContext) -> Any:
                type(self).builds += 1
                if always or self.autotune:
                    raise RuntimeError(f"{NO_ALGORITHM} (CUDNN_STATUS_NOT_SUPPORTED)")
                return super().build(spec, case, ctx)

            def autotune_off(self) -> bool:
                self.autotune = False
                return True

            def memory_used_share(self) -> float | None:
                return used

        return Backend()


def _run_with(monkeypatch: pytest.MonkeyPatch, backend: Any) -> Any:
    from dlbench import worker

    monkeypatch.setattr("dlbench.backends.load_backend", lambda name: backend)
    spec = PointSpec(framework="fake", model="alexnet", batch_size=1, protocol=Protocol(0, 2, 1, "median"))
    return worker.run(spec, RankContext())


def test_cudnn_no_algorithm_is_retried_once_without_autotuning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try fails with cuDNN's "no valid algorithm"; the second, autotuning off, trains: ok, with the
    retry recorded."""
    backend = _CudnnBackend(always=False, used=0.5)
    result = _run_with(monkeypatch, backend)
    assert result.status == "ok", result.error
    assert type(backend).builds == 2 and NO_ALGORITHM in str(result.facts[cudnn_fallback.RETRIED])


@pytest.mark.parametrize(("used", "status"), [(0.97, "oom"), (0.4, "error")])
def test_cudnn_no_algorithm_twice_reads_as_oom_only_with_memory_nearly_full(
    monkeypatch: pytest.MonkeyPatch, used: float, status: str
) -> None:
    """Failing again after the retry: out of memory where the device's memory is nearly full, else the error."""
    backend = _CudnnBackend(always=True, used=used)
    result = _run_with(monkeypatch, backend)
    assert (result.status, type(backend).builds) == (status, 2)
    assert cudnn_fallback.no_algorithm(result.error or "")
    assert not cudnn_fallback.no_algorithm("CUDA error: an illegal memory access was encountered")


def test_torch_turns_cudnn_autotuning_off_for_the_retry() -> None:
    """torch's backend can turn autotuning off; its build then leaves cudnn.benchmark off (read on CUDA paths)."""
    _torch()
    from dlbench.backends.torch.backend import TorchBackend

    backend = TorchBackend()
    assert backend._autotune and backend.autotune_off() and not backend._autotune
    assert backend.memory_used_share() is None  # this CPU: no CUDA device to read


# ------------------------------------------------------------------------------------------------------ GradScaler


def _first_step_updates(scaler: Any) -> bool:
    """Whether one fp16-autocast step (torch's CPU kernels) of a linear layer over inputs of magnitude 4 changes
    its weights under the scaler: a loss scaled by 2^16 overflows the fp16 weight gradient, and the step is
    skipped."""
    torch = _torch()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    x, y = torch.full((2, 16), 4.0), torch.tensor([3, 7])
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return not torch.equal(before, model.weight.detach())


def test_grad_scaler_initial_scale_lets_the_first_step_update() -> None:
    """dlbench's GradScaler starts at LOSS_SCALE_INIT: the first step updates the weights, where torch's default
    2^16 skips it (shown beside it, so that the check means something); the scale is recorded on the point."""
    torch = _torch()
    from dlbench.backends.torch.step import TorchTrainer, grad_scaler

    assert not _first_step_updates(torch.amp.GradScaler("cpu"))  # torch's default overflows here
    scaler = grad_scaler("cpu")
    assert scaler.get_scale() == LOSS_SCALE_INIT
    assert _first_step_updates(scaler)
    from dlbench.cases import get_case

    trainer = TorchTrainer(
        get_case("resnet50"),
        torch.nn.Linear(4, 4),
        iter(()),
        torch.device("cpu"),
        resolve_precision("amp", "cuda"),
        False,
        8,
    )
    assert trainer.scaler is not None and trainer.scaler.get_scale() == LOSS_SCALE_INIT


def test_bare_loop_starts_its_scaler_where_dlbench_does() -> None:
    """fairness.py passes dlbench's initial scale to the bare torch loop, which builds its GradScaler with it."""
    _torch()
    sys.path.insert(0, str(REPO / "benchmarks"))
    import fairness

    args = fairness.parser().parse_args(["--device", "cuda", "--precision", "amp"])
    argv = fairness.loop_argv("torch", args)
    assert float(argv[argv.index("--loss-scale-init") + 1]) == LOSS_SCALE_INIT
    source = (REPO / "benchmarks" / "fairness_loops" / "torch_loop.py").read_text()
    assert "init_scale=args.loss_scale_init" in source
    assert _torch_loop().parse_args(None, argv).loss_scale_init == LOSS_SCALE_INIT


# ------------------------------------------------------------------------------------------------------------ BERT


@pytest.mark.slow
def test_bert_trains_with_no_mask_when_every_token_is_real() -> None:
    """The synthetic BERT batch attends to every token, so torch gets no mask (SDPA may pick a fused kernel); the
    loss is the one an all-ones mask gives; the point records its attention."""
    torch = _torch()
    from dlbench.backends.torch import data, models
    from dlbench.backends.torch.backend import TorchBackend
    from dlbench.cases import get_case

    case = get_case("bert_base")
    batch = data.synthetic_batch(case, 2, torch.device("cpu"), input_size=16)
    assert "attention_mask" not in batch
    torch.manual_seed(0)
    model = models.build_model(case).eval()
    with torch.no_grad():
        unmasked = models.train_loss(case, model, batch)
        masked = models.train_loss(case, model, {**batch, "attention_mask": torch.ones(2, 16, dtype=torch.int64)})
    assert torch.allclose(unmasked, masked, atol=1e-5)
    spec = PointSpec(
        framework="torch",
        model="bert_base",
        batch_size=2,
        input_size=16,
        device="cpu",
        protocol=Protocol(0, 1, 1, "median"),
    )
    backend = TorchBackend()
    backend.build(spec, case, RankContext())
    assert "no mask (every token real)" in str(backend.facts()["attention"])


# ---------------------------------------------------------------------------------- headline, peaks, old driver


def test_headline_resnet50_point_is_channels_last() -> None:
    """Stage (a)'s ResNet-50 amp point, the published headline, is NHWC as NVIDIA publishes it."""
    script = (REPO / "benchmarks" / "gpu" / "validate.sh").read_text()
    stage_a = script[script.index("stage_a() {") : script.index("stage_b() {")]
    line = next(ln for ln in stage_a.splitlines() if "-m resnet50" in ln)
    assert "-p amp" in line and "--channels-last" in line


@pytest.mark.parametrize(
    ("name", "bf16"),
    [
        ("NVIDIA GH200 480GB", 989.5),
        ("NVIDIA H100 96GB HBM3", 989.5),
        ("NVIDIA H800", 989.5),
        ("NVIDIA H20", 148.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA B300", 2250.0),
        ("NVIDIA GB200", 2500.0),
    ],
)
def test_peak_table_knows_the_new_names(name: str, bf16: float) -> None:
    """GPU names that read "peak unknown" before: each has its dense bf16 datasheet peak, with a source."""
    found = gpu_peak(name, "bf16")
    assert found.peak is not None and found.peak.tflops == bf16 and found.peak.source.startswith("https://")


def test_driver_older_than_the_torch_build_is_said_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch built for CUDA 13.0 under a CUDA 12.8 driver sees no device while NVML sees the GPU: the point says
    the driver is older than the build, with both versions, not "a CPU build, or no GPU"."""
    torch = _torch()
    from dlbench.backends.torch.backend import TorchBackend

    why = no_device_reason("torch", "13.0", driver="12.8", gpus=1)
    assert "driver is older than this torch build" in why and "12.8" in why and "13.0" in why
    assert "CPU build" in no_device_reason("torch", "")
    nv = install(monkeypatch, [FakeGpu("GPU-h100-0", name=H100)])
    monkeypatch.setattr(nv, "nvmlSystemGetCudaDriverVersion", lambda: 12080, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = PointSpec(
        framework="torch", model="alexnet", batch_size=1, device="cuda", protocol=Protocol(0, 1, 1, "median")
    )
    said = TorchBackend().refuse(spec) or ""
    assert said.startswith("the NVIDIA driver is older than this torch build") and "\n" not in said
