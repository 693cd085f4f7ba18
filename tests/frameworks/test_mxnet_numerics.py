"""MXNet's numerics policy and out-of-memory classification, on the CPU, read back from MXNet itself.

Each test runs a short script with the mxnet environment's interpreter (this file never imports mxnet): the
tensor-core/TF32 switches as MXNet's own getenv sees them after a tiny fp32 build, the policy's refusals, and
`oom_error` on MXNet's real out-of-memory error, raised by a failed CPU allocation under an address-space
limit. Without that environment every test skips, naming it (`dlbench setup mxnet`).
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

pytestmark = [pytest.mark.framework("mxnet"), pytest.mark.slow]

PRELUDE = """
import json, resource
from dlbench.backends.mxnet.backend import MxnetBackend
import mxnet as mx
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from dlbench.worker import refusal

def spec(precision, device="cpu", model="resnet50"):
    return PointSpec(framework="mxnet", model=model, batch_size=1, input_size=32, precision=precision,
                     device=device, protocol=Protocol(0, 1, 1, "median"))
"""


def run_mxnet(python: str, body: str) -> dict[str, object]:
    """Run PRELUDE + body in the mxnet environment; body prints one JSON object as its last line."""
    proc = subprocess.run(
        [python, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_fp32_build_leaves_mxnet_without_tensor_cores(framework_python: str) -> None:
    answer = run_mxnet(
        framework_python,
        """
        backend = MxnetBackend()
        trainer = backend.build(spec("fp32"), get_case("resnet50"), RankContext())
        trainer.train_step(trainer.next_batch())
        print(json.dumps({"tensor_core": mx.util.getenv("MXNET_CUDA_ALLOW_TENSOR_CORE"),
                          "tf32_override": mx.util.getenv("NVIDIA_TF32_OVERRIDE"),
                          "math_mode": backend.environment(spec("fp32"))["math_mode"], "loss": trainer.loss()}))
    """,
    )
    # read back through MXNet's own getenv (the C library's view, what its cuBLAS/cuDNN code reads)
    assert answer["tensor_core"] == "0" and answer["tf32_override"] == "0", answer
    assert answer["math_mode"] == "fp32"


def test_tf32_and_amp_are_refused_on_the_cpu_and_several_devices_need_a_kvstore_named(framework_python: str) -> None:
    answer = run_mxnet(
        framework_python,
        """
        import dataclasses
        backend = MxnetBackend()
        two = dataclasses.replace(spec("fp32"), nodes=1, devices_per_node=2)
        print(json.dumps({p: refusal(backend, spec(p)) for p in ("tf32", "amp")} | {"two": refusal(backend, two)}))
    """,
    )
    assert "NVIDIA GPUs" in str(answer["tf32"]) and "for GPUs" in str(answer["amp"]), answer
    assert "needs a strategy named on several devices" in str(answer["two"]), answer  # its kvstores: --strategy


def test_oom_error_knows_mxnets_real_allocation_failure(framework_python: str) -> None:
    answer = run_mxnet(
        framework_python,
        """
        backend = MxnetBackend()
        x = mx.nd.ones((4,)); x.wait_to_read()  # engine and thread pools up before the limit
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), hard))
        try:
            big = mx.nd.zeros((1 << 30,)); big.wait_to_read()  # 4 GiB, over the limit
            raised = None
        except mx.base.MXNetError as exc:
            raised = exc
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        other = mx.base.MXNetError("Check failed: shape mismatch")
        try:  # an OOM wrapped by a later error (as a failure inside hybridize's graph build reads)
            try:
                raise raised
            except mx.base.MXNetError as inner:
                raise RuntimeError("hybridized forward failed") from inner
        except RuntimeError as outer:
            wrapped = outer
        print(json.dumps({"message": str(raised).strip().splitlines()[-1], "oom": backend.oom_error(raised),
                          "other": backend.oom_error(other), "wrapped": backend.is_oom(wrapped),
                          "plain_runtime": backend.oom_error(RuntimeError("out of memory"))}))
    """,
    )
    assert answer["oom"] is True and answer["wrapped"] is True, answer
    assert answer["other"] is False and answer["plain_runtime"] is False, answer
