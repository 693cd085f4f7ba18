"""Paddle's numerics policy and out-of-memory classification, on the CPU, read back from paddle itself.

Each test runs a short script with the paddle environment's interpreter (this file never imports paddle) and
checks what paddle reports: its TF32 flags after a tiny fp32 build, the policy's refusals, and `oom_error` on
paddle's real out-of-memory exceptions, raised by a failed allocation in eager mode and inside a to_static
program. Without that environment every test skips, naming it (`dlbench setup paddle`).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.framework("paddle"), pytest.mark.slow]

# One shared prelude: the backend and a tiny point's spec. 2**48 float32 elements (1 PiB) exceed any address
# space, so the allocation fails at once, whatever the kernel's overcommit policy.
PRELUDE = """
import json, paddle
from dlbench.backends.base import Unsupported
from dlbench.backends.paddle.backend import TF32_FLAGS, PaddleBackend, set_tf32, tf32_state
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from dlbench.worker import refusal

def spec(precision, model="resnet50"):
    return PointSpec(framework="paddle", model=model, batch_size=1, input_size=32, precision=precision,
                     protocol=Protocol(0, 1, 1, "median"))

HUGE = [2**24, 2**24]

def huge_plus(x):
    return x + paddle.empty(HUGE, dtype="float32").sum()
"""


def run_paddle(python: str, body: str, folder: Path) -> dict[str, object]:
    """Run PRELUDE + body in the paddle environment, from a file (to_static reads its functions' source); body
    prints one JSON object as its last line."""
    script = folder / "check_paddle.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_fp32_build_leaves_paddle_without_tf32(framework_python: str, tmp_path: Path) -> None:
    answer = run_paddle(
        framework_python,
        """
        backend = PaddleBackend()
        trainer = backend.build(spec("fp32"), get_case("resnet50"), RankContext())
        trainer.train_step(trainer.next_batch())
        flags = {}
        for flag in TF32_FLAGS:  # read back from paddle itself, not through the backend
            try:
                flags[flag] = paddle.get_flags([flag])[flag]
            except ValueError:
                flags[flag] = "absent"
        print(json.dumps({"cuda_build": paddle.is_compiled_with_cuda(), "flags": flags,
                          "math_mode": backend.environment(spec("fp32"))["math_mode"],
                          "fact": backend.facts()["paddle_tf32_flags"], "loss": trainer.loss()}))
    """,
        tmp_path,
    )
    flags = answer["flags"]
    assert isinstance(flags, dict) and set(flags) == {"FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn"}
    if answer["cuda_build"]:  # a CUDA build has both switches: fp32 turned them off
        assert set(flags.values()) == {False}, flags
    else:  # a CPU build has no TF32 to turn off, and says so
        assert set(flags.values()) == {"absent"}, flags
        assert answer["fact"] == "absent (CPU build)"
    assert answer["math_mode"] == "fp32"
    assert isinstance(answer["loss"], float)


def test_tf32_and_amp_are_refused_on_the_cpu_and_bf16_is_probed(framework_python: str, tmp_path: Path) -> None:
    answer = run_paddle(
        framework_python,
        """
        backend = PaddleBackend()
        out = {p: refusal(backend, spec(p)) for p in ("fp32", "tf32", "amp", "bf16")}  # device cpu
        try:
            set_tf32(True)
            out["set_tf32"] = tf32_state()
        except Unsupported as exc:
            out["set_tf32"] = str(exc)
        out["cuda_build"] = paddle.is_compiled_with_cuda()
        print(json.dumps(out))
    """,
        tmp_path,
    )
    assert answer["fp32"] is None
    assert "tf32 is a tensor-core mode of NVIDIA GPUs" in str(answer["tf32"])
    assert "amp is float16 with loss scaling, for GPUs" in str(answer["amp"])
    assert answer["bf16"] is None or "leaves every op in float32" in str(answer["bf16"])
    if answer["cuda_build"]:
        assert answer["set_tf32"] == {"FLAGS_allow_tf32_cublas": True, "FLAGS_allow_tf32_cudnn": True}
    else:  # TF32 cannot be turned on in a build without the flags: Unsupported names them
        assert "lacks FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn" in str(answer["set_tf32"])


def test_paddles_own_out_of_memory_errors_are_recognised(framework_python: str, tmp_path: Path) -> None:
    answer = run_paddle(
        framework_python,
        """
        backend = PaddleBackend()
        out = {}
        try:
            paddle.empty(HUGE, dtype="float32")
        except Exception as exc:
            out["eager"] = [type(exc).__name__, backend.oom_error(exc), backend.is_oom(exc)]
        try:  # the same failure inside a to_static program: dy2static re-raises it, rewritten
            paddle.jit.to_static(huge_plus)(paddle.ones([1]))  # the backend's converter (SOT)
        except Exception as exc:
            out["to_static"] = [type(exc).__name__, backend.oom_error(exc), backend.is_oom(exc)]
            try:  # and wrapped once more, as a caller's RuntimeError would
                raise RuntimeError("step failed") from exc
            except RuntimeError as outer:
                out["wrapped"] = [backend.oom_error(outer), backend.is_oom(outer)]
        try:
            paddle.ones([2, 3]) @ paddle.ones([4, 5])
        except Exception as exc:
            out["not_oom"] = [type(exc).__name__, backend.is_oom(exc)]
        print(json.dumps(out))
    """,
        tmp_path,
    )
    assert answer["eager"] == ["MemoryError", True, True]
    assert answer["to_static"] == ["MemoryError", True, True]
    assert answer["wrapped"] == [False, True]  # found through the cause chain
    not_oom = answer["not_oom"]
    assert isinstance(not_oom, list) and not_oom[1] is False, not_oom


# --- gpu-b: Paddle's own benchmark settings on a GPU (CUDA mocked at paddle's boundary), amp's host read, NHWC ---
# One paddle process for both tests: first NHWC on the real CPU, then a GPU build with CUDA mocked.
GPU_B = """
import dataclasses, inspect
import dlbench.backends.paddle.backend as paddle_backend
from dlbench.backends.paddle.models import build_model

out = {"nhwc": {}}
case = get_case("resnet50")
paddle.seed(0)
nchw = build_model(case)
paddle.seed(0)
nhwc = build_model(case, "NHWC")
x = paddle.randn([4, 3, 64, 64])
for mode in ("eval", "train"):
    getattr(nchw, mode)()
    getattr(nhwc, mode)()
    a, b = nchw(x), nhwc(x.transpose([0, 2, 3, 1]))
    out["nhwc"][mode] = float((a - b).abs().max() / a.abs().max())
backend = PaddleBackend()
last = dataclasses.replace(spec("fp32"), channels_last=True)
out["nhwc"]["refused"] = refusal(backend, last)
trainer = backend.build(last, case, RankContext())
trainer.train_step(trainer.next_batch())
out["nhwc"].update(loss=trainer.loss(), layout=backend.facts()["paddle_layout"],
                   image=list(trainer.next_batch()["images"].shape),
                   vgg=refusal(backend, dataclasses.replace(spec("fp32", "vgg16"), channels_last=True)))

# A CUDA build, mocked at paddle's boundary: its flags (cuBLAS TF32 on by default), one GPU, CPU tensors.
FLAGS = {"FLAGS_allow_tf32_cublas": True, "FLAGS_allow_tf32_cudnn": True, "FLAGS_cudnn_exhaustive_search": False,
         "FLAGS_conv_workspace_size_limit": 512, "FLAGS_cudnn_batchnorm_spatial_persistent": False,
         "FLAGS_max_inplace_grad_add": 0, "FLAGS_use_mkldnn": False}

def get_flags(names):
    for n in [names] if isinstance(names, str) else names:
        if n not in FLAGS:
            raise ValueError(f"Flag {n} cannot get its value through this function.")
    return {n: FLAGS[n] for n in ([names] if isinstance(names, str) else names)}

cpu_set_device = paddle.set_device
paddle.get_flags, paddle.set_flags = get_flags, FLAGS.update
paddle.device.cuda.device_count = lambda: 1
paddle.device.cuda.get_device_name = lambda device: "NVIDIA H100 80GB HBM3"
paddle.set_device = lambda device: cpu_set_device("cpu")
paddle_backend._has_gpu = lambda: True
for precision in ("fp32", "amp"):
    backend = PaddleBackend()
    gpu = dataclasses.replace(spec(precision), device="cuda")
    out[precision] = {"refused": backend.refuse(gpu)}
    trainer = backend.build(gpu, case, RankContext())
    out[precision].update(facts={k: str(v) for k, v in backend.facts().items()}, env=backend.environment(gpu),
                          image=list(trainer.next_batch()["images"].shape),
                          master_weights=bool(trainer.optimizer._multi_precision))
out["flags"] = dict(FLAGS)
for flag in TF32_FLAGS:  # an old CUDA build without the TF32 switches
    del FLAGS[flag]
out["old_build_fp32"] = PaddleBackend().refuse(dataclasses.replace(spec("fp32"), device="cuda"))
out["scaler_source"] = inspect.getsource(paddle.optimizer.Optimizer._create_optimization_pass)
out["bool_source"] = inspect.getsource(paddle.Tensor.__nonzero__)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def gpu_b(framework_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The NHWC and mocked-GPU probe's answer (one paddle process for the two tests below)."""
    return run_paddle(framework_python, GPU_B, tmp_path_factory.mktemp("gpu_b"))


def test_gpu_build_applies_paddles_benchmark_settings_and_records_the_host_read(gpu_b: dict[str, object]) -> None:
    fp32, amp = gpu_b["fp32"], gpu_b["amp"]
    assert isinstance(fp32, dict) and isinstance(amp, dict)
    assert fp32["refused"] is None and amp["refused"] is None
    assert gpu_b["flags"] == {
        "FLAGS_allow_tf32_cublas": False,
        "FLAGS_allow_tf32_cudnn": False,
        "FLAGS_cudnn_exhaustive_search": True,
        "FLAGS_conv_workspace_size_limit": 4000,
        "FLAGS_cudnn_batchnorm_spatial_persistent": True,
        "FLAGS_max_inplace_grad_add": 8,
        "FLAGS_use_mkldnn": False,
    }
    for point in (fp32, amp):
        for where in ("facts", "env"):
            assert point[where]["cudnn_exhaustive_search"] == "True"
            assert point[where]["conv_workspace_size_limit"] == "4000"
        assert point["env"]["math_mode"] == ("fp32" if point is fp32 else "fp16")
    assert (fp32["facts"]["paddle_layout"], fp32["facts"]["autocast"], fp32["image"]) == ("NCHW", "off", [1, 3, 32, 32])
    assert (amp["facts"]["paddle_layout"], amp["facts"]["autocast"], amp["image"]) == (
        "NHWC",
        "O2 float16",
        [1, 32, 32, 3],
    )
    assert amp["master_weights"] and not fp32["master_weights"]
    assert "Optimizer._create_optimization_pass" in amp["facts"]["amp_host_sync"]
    assert "amp_host_sync" not in fp32["facts"]
    assert "if found_inf:" in str(gpu_b["scaler_source"]) and "np.array(self)" in str(gpu_b["bool_source"])
    assert "lacks FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn: it cannot guarantee IEEE fp32" in str(
        gpu_b["old_build_fp32"]
    )


def test_nhwc_resnet_computes_what_nchw_does_and_trains_on_the_cpu(gpu_b: dict[str, object]) -> None:
    answer = gpu_b["nhwc"]
    assert isinstance(answer, dict)
    assert answer["eval"] < 1e-5 and answer["train"] < 1e-3  # the same weights compute the same function
    assert answer["refused"] is None and answer["layout"] == "NHWC" and answer["image"] == [1, 32, 32, 3]
    assert isinstance(answer["loss"], float) and answer["loss"] == answer["loss"]  # a finite CPU step
    assert "NCHW only" in str(answer["vgg"])
