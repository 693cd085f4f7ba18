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
from conftest import framework_python

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

def spec(precision, model="resnet50"):
    return PointSpec(framework="paddle", model=model, batch_size=1, input_size=32, precision=precision,
                     protocol=Protocol(0, 1, 1, "median"))

HUGE = [2**24, 2**24]

def huge_plus(x):
    return x + paddle.empty(HUGE, dtype="float32").sum()
"""


@pytest.fixture(scope="module")
def paddle_python() -> str:
    """The paddle environment's interpreter, or a skip naming it."""
    return framework_python("paddle")


def run_paddle(python: str, body: str, folder: Path) -> dict[str, object]:
    """Run PRELUDE + body in the paddle environment, from a file (to_static reads its functions' source); body
    prints one JSON object as its last line."""
    script = folder / "check_paddle.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_fp32_build_leaves_paddle_without_tf32(paddle_python: str, tmp_path: Path) -> None:
    answer = run_paddle(paddle_python, """
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
    """, tmp_path)
    flags = answer["flags"]
    assert isinstance(flags, dict) and set(flags) == {"FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn"}
    if answer["cuda_build"]:  # a CUDA build has both switches: fp32 turned them off
        assert set(flags.values()) == {False}, flags
    else:  # a CPU build has no TF32 to turn off, and says so
        assert set(flags.values()) == {"absent"}, flags
        assert answer["fact"] == "absent (CPU build)"
    assert answer["math_mode"] == "fp32"
    assert isinstance(answer["loss"], float)


def test_tf32_and_amp_are_refused_on_the_cpu_and_bf16_is_probed(paddle_python: str, tmp_path: Path) -> None:
    answer = run_paddle(paddle_python, """
        backend = PaddleBackend()
        out = {p: backend.refuse(spec(p)) for p in ("fp32", "tf32", "amp", "bf16")}  # device cpu
        try:
            set_tf32(True)
            out["set_tf32"] = tf32_state()
        except Unsupported as exc:
            out["set_tf32"] = str(exc)
        out["cuda_build"] = paddle.is_compiled_with_cuda()
        print(json.dumps(out))
    """, tmp_path)
    assert answer["fp32"] is None
    assert "tf32 is a tensor-core mode of NVIDIA GPUs" in str(answer["tf32"])
    assert "amp is float16 with loss scaling, for GPUs" in str(answer["amp"])
    assert answer["bf16"] is None or "leaves every op in float32" in str(answer["bf16"])
    if answer["cuda_build"]:
        assert answer["set_tf32"] == {"FLAGS_allow_tf32_cublas": True, "FLAGS_allow_tf32_cudnn": True}
    else:  # TF32 cannot be turned on in a build without the flags: Unsupported names them
        assert "lacks FLAGS_allow_tf32_cublas, FLAGS_allow_tf32_cudnn" in str(answer["set_tf32"])


def test_paddles_own_out_of_memory_errors_are_recognised(paddle_python: str, tmp_path: Path) -> None:
    answer = run_paddle(paddle_python, """
        backend = PaddleBackend()
        out = {}
        try:
            paddle.empty(HUGE, dtype="float32")
        except Exception as exc:
            out["eager"] = [type(exc).__name__, backend.oom_error(exc), backend.is_oom(exc)]
        try:  # the same failure inside a to_static program: dy2static re-raises it, rewritten
            paddle.jit.to_static(huge_plus, full_graph=True)(paddle.ones([1]))
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
    """, tmp_path)
    assert answer["eager"] == ["MemoryError", True, True]
    assert answer["to_static"] == ["MemoryError", True, True]
    assert answer["wrapped"] == [False, True]  # found through the cause chain
    not_oom = answer["not_oom"]
    assert isinstance(not_oom, list) and not_oom[1] is False, not_oom
