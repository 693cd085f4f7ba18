"""MindSpore's numerics policy and out-of-memory classification, on the CPU, from MindSpore itself.

Each test runs a short script with the mindspore environment's interpreter (this file never imports
mindspore): the math mode and facts of a tiny fp32 build, the policy's refusals, and `oom_error` on MindSpore's
real out-of-memory errors, raised by a failed allocation under an address-space limit, op by op and while an
ms.jit graph compiles (its constant folding allocates: std::bad_alloc). Without that environment every test skips, naming it (`dlbench setup mindspore`).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.framework("mindspore"), pytest.mark.slow]

PRELUDE = """
import dataclasses, json, resource
import mindspore as ms
from mindspore import ops
from dlbench.backends.mindspore.backend import MindsporeBackend
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from dlbench.worker import refusal

def spec(precision, model="resnet50"):
    return PointSpec(framework="mindspore", model=model, batch_size=1, input_size=32, precision=precision,
                     protocol=Protocol(0, 1, 1, "median"))
"""


def run_ms(python: str, body: str, folder: Path) -> dict[str, object]:
    """Run PRELUDE + body in the mindspore environment, from a file (ms.jit reads its functions' source); body
    prints one JSON object as its last line."""
    script = folder / "check_mindspore.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_fp32_build_on_the_cpu_is_fp32_and_the_rest_is_refused(framework_python: str, tmp_path: Path) -> None:
    answer = run_ms(
        framework_python,
        """
        backend = MindsporeBackend()
        trainer = backend.build(spec("fp32"), get_case("resnet50"), RankContext())
        trainer.train_step(trainer.next_batch())
        two = dataclasses.replace(spec("fp32"), nodes=1, devices_per_node=2)
        print(json.dumps({"target": ms.get_context("device_target"), "env": backend.environment(spec("fp32")),
                          "facts": backend.facts(), "peak": trainer.allocator_peak() is None,
                          "refused": {p: refusal(backend, spec(p)) for p in ("tf32", "amp", "bf16")},
                          "two": refusal(backend, two)}))
    """,
        tmp_path,
    )
    env, facts, refused = answer["env"], answer["facts"], answer["refused"]
    assert answer["target"] == "CPU" and isinstance(env, dict) and env["math_mode"] == "fp32", answer
    assert isinstance(facts, dict) and "conv_allow_tf32" not in facts  # the GPU switches are not touched on a CPU
    assert answer["peak"] is True  # no device allocator peak on the CPU: the worker measures the process
    assert isinstance(refused, dict) and "NVIDIA GPUs" in str(refused["tf32"]) and "for GPUs" in str(refused["amp"])
    assert "no bf16" in str(refused["bf16"]) and "one device only" in str(answer["two"]), answer


def test_oom_error_knows_mindspores_real_allocation_failure(framework_python: str, tmp_path: Path) -> None:
    answer = run_ms(
        framework_python,
        """
        backend = MindsporeBackend()
        ops.ones((4,), ms.float32).asnumpy()  # runtime and pools up before the limit

        @ms.jit
        def graph_ones(x):
            return ops.ones((1 << 30,), ms.float32) + x

        def failure(make):
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), hard))
            try:
                make().asnumpy()  # 4 GiB, over the limit
                return None
            except Exception as exc:
                return exc
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

        eager = failure(lambda: ops.ones((1 << 30,), ms.float32))
        graph = failure(lambda: graph_ones(ms.Tensor(1.0, ms.float32)))
        print(json.dumps({"eager": [type(eager).__name__, backend.oom_error(eager)],
                          "graph": [type(graph).__name__, backend.is_oom(graph)], "graph_text": str(graph),
                          "other": backend.oom_error(RuntimeError("For 'MatMul', the shapes do not match")),
                          "not_runtime": backend.oom_error(ValueError("out of memory"))}))
    """,
        tmp_path,
    )
    assert answer["eager"] == ["RuntimeError", True] and answer["graph"] == ["RuntimeError", True], answer
    assert answer["other"] is False and answer["not_runtime"] is False, answer
