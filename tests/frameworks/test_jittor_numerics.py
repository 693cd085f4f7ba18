"""Jittor's numerics policy and out-of-memory classification, on the CPU, read back from Jittor itself.

A short script runs with the jittor environment's interpreter (this file never imports jittor): the
tensor-core flag as jt.flags reads it after a tiny fp32 build, the TF32 override cuBLAS and cuDNN read, the
policy's refusals, and `oom_error` on Jittor's out-of-memory errors. Jittor raises a failed allocation as a
RuntimeError carrying its CUDA allocator's message (a failed CPU allocation kills the process instead, so the
exception is built here with the text of Jittor's source). Without that environment every test skips, naming it
(`dlbench setup jittor`).
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

# Jittor compiles its kernels first: its subprocess may take 1200 s (past the default per-test timeout)
pytestmark = [pytest.mark.framework("jittor"), pytest.mark.slow, pytest.mark.timeout(1500)]

SCRIPT = """
import dataclasses, json, os
from dlbench.backends.jittor.backend import JittorBackend
import jittor as jt
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from dlbench.worker import refusal

def spec(precision):
    return PointSpec(framework="jittor", model="resnet50", batch_size=1, input_size=32, precision=precision,
                     protocol=Protocol(0, 1, 1, "median"))

backend = JittorBackend()
trainer = backend.build(spec("fp32"), get_case("resnet50"), RankContext())
trainer.train_step(trainer.next_batch())
alloc = RuntimeError("[f 1123 16:45:08 cuda_device_allocator.cc:31] Unable to alloc cuda device memory for size"
                     "4294967296")
try:  # a CUDA error wrapped by a later one, as Jittor's op compiler re-raises it
    try:
        raise RuntimeError("CUDA error at cudnn_conv_op.cc:212 code=2( cudaErrorMemoryAllocation ) out of memory")
    except RuntimeError as inner:
        raise RuntimeError("Wrong inputs arguments, Please refer to examples(help(jt.ops.conv))") from inner
except RuntimeError as outer:
    wrapped = outer
print(json.dumps({"use_tensorcore": int(jt.flags.use_tensorcore), "override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
                  "math_mode": backend.environment(spec("fp32"))["math_mode"], "loss": trainer.loss(),
                  "refused": {p: refusal(backend, spec(p)) for p in ("tf32", "amp", "bf16")},
                  "two": refusal(backend, dataclasses.replace(spec("fp32"), nodes=1, devices_per_node=2)),
                  "alloc": backend.oom_error(alloc), "wrapped": backend.is_oom(wrapped),
                  "wrapper_alone": backend.oom_error(wrapped),
                  "not_runtime": backend.oom_error(ValueError("out of memory"))}))
"""


def test_fp32_without_tensor_cores_refusals_and_oom_classification(framework_python: str) -> None:
    proc = subprocess.run(
        [framework_python, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, timeout=1200, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["use_tensorcore"] == 0 and answer["override"] == "0" and answer["math_mode"] == "fp32", answer
    refused = answer["refused"]
    assert "NVIDIA GPUs" in refused["tf32"] and "for GPUs" in refused["amp"] and "fp32 only" in refused["bf16"]
    assert "one device only" in answer["two"]
    assert answer["alloc"] is True and answer["wrapped"] is True, answer
    assert answer["wrapper_alone"] is False and answer["not_runtime"] is False, answer
