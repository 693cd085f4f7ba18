"""The JAX backend's GPU settings, checked on the CPU in the jax environment: the numerics policy read back from
JAX's config, the out-of-memory classification from XLA's real exception, the allocator peak, the rank's device
from the RankContext, no preallocation and the persistent compilation cache.

Each check runs a short script with the jax environment's interpreter (this file never imports jax); without
that environment every test skips, naming it (`dlbench setup jax`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]


def run_script(
    python: str, script: str, env: dict[str, str | None] | None = None, timeout: float = 600
) -> dict[str, object]:
    """Run a script in the jax environment (env: variables to set, None to unset) and parse the JSON object on
    its last line."""
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        environ.pop(name, None)
        if value is not None:
            environ[name] = value
    proc = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, timeout=timeout, check=False, env=environ
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


NUMERICS = """
import dataclasses, json, jax
from dlbench.backends.base import Unsupported
from dlbench.backends.jax.backend import JaxBackend, apply_numerics, read_precision
from dlbench.cases import get_case
from dlbench.numerics import resolve_precision
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from dlbench.worker import refusal

backend = JaxBackend()
out = {"default_precision": read_precision()}
def spec(precision):
    return PointSpec(framework="jax", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"),
                     input_size=64, precision=precision)
for p in ("tf32", "amp"):
    out["refuse_" + p] = refusal(backend, spec(p))
trainer = backend.build(spec("fp32"), get_case("alexnet"), RankContext())
trainer.train_step(trainer.next_batch())
trainer.sync()
env = backend.environment(spec("fp32"))
out.update(fp32_precision=read_precision(), fp32_env=env, facts=backend.facts(),
           peak=trainer.allocator_peak(), loss=trainer.loss())
trainer.close()
try:
    backend.build(dataclasses.replace(spec("fp32"), device="cuda"), get_case("alexnet"), RankContext())
    out["cuda"] = "built"
except Unsupported as exc:
    out["cuda"] = str(exc)
out["tf32_precision"] = apply_numerics(resolve_precision("tf32", "cuda"))
out["bf16_precision"] = apply_numerics(resolve_precision("bf16", "cpu"))
print(json.dumps(out, default=str))
"""


def test_fp32_sets_ieee_precision_and_reads_it_back(framework_python: str, tmp_path: Path) -> None:
    """fp32 sets JAX's matmul/conv precision to 'highest' (no TF32), read back into math_mode; tf32 and amp are
    refused on the CPU with the policy's reason; tf32 would set 'tensorfloat32'."""
    answer = run_script(framework_python, NUMERICS, {"DLBENCH_HOME": str(tmp_path)})
    assert answer["default_precision"] is None  # XLA's default: TF32 on Ampere and later GPUs
    assert answer["fp32_precision"] == "highest"
    env = answer["fp32_env"]
    assert isinstance(env, dict) and env["math_mode"] == "fp32" and env["jax_matmul_precision"] == "highest"
    assert "tf32 is a tensor-core mode" in str(answer["refuse_tf32"])
    assert "amp is float16 with loss scaling" in str(answer["refuse_amp"])
    assert answer["tf32_precision"] == "tensorfloat32" and answer["bf16_precision"] == "highest"
    assert "jax here has no GPU backend" in str(answer["cuda"])  # a CPU jaxlib asked for a GPU: unsupported
    facts = answer["facts"]
    assert isinstance(facts, dict) and facts["jax_default_matmul_precision"] == "highest"
    assert facts["jax_compilation_cache_dir"] == str(tmp_path / "cache" / "jax")
    assert answer["peak"] is None  # the CPU keeps no allocator peak: never host RSS in its place
    assert isinstance(answer["loss"], float)


PREALLOCATE = """
import json, os
import dlbench.backends.jax
import jax
print(json.dumps({"v": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}))
"""


def test_preallocation_is_off_unless_the_user_set_it(framework_python: str) -> None:
    """Importing the backend package turns XLA's 75% GPU preallocation off; a value the user set is kept."""
    unset: dict[str, str | None] = {"XLA_PYTHON_CLIENT_PREALLOCATE": None, "XLA_PYTHON_CLIENT_MEM_FRACTION": None}
    assert run_script(framework_python, PREALLOCATE, unset)["v"] == "false"
    assert run_script(framework_python, PREALLOCATE, {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})["v"] == "true"


OOM = """
import json, resource
import jax, jax.numpy as jnp
from dlbench.backends.jax.backend import JaxBackend

backend = JaxBackend()
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # the 1 TiB buffer must fail, not swap
out = {}
try:
    jax.jit(lambda: jnp.zeros((1 << 38,), jnp.float32))().block_until_ready()
    out["real"] = "allocated"
except Exception as exc:
    out["real"] = [type(exc).__name__, str(exc)[:80], backend.is_oom(exc)]
made = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.")
try:  # wrapped, the way a compile or a lowering step re-raises what XLA raised inside it
    try:
        raise made
    except jax.errors.JaxRuntimeError as inner:
        raise RuntimeError("while compiling the train step") from inner
except RuntimeError as outer:
    out["wrapped"] = backend.is_oom(outer)
out["made"] = backend.oom_error(made)
out["other"] = backend.is_oom(jax.errors.JaxRuntimeError("INVALID_ARGUMENT: shapes do not match"))
out["plain"] = backend.is_oom(RuntimeError("RESOURCE_EXHAUSTED is only mentioned here"))
print(json.dumps(out))
"""


def test_resource_exhausted_is_an_oom(framework_python: str) -> None:
    """XLA's RESOURCE_EXHAUSTED (a real one from a jitted allocation, one constructed and wrapped) is `oom`;
    another XLA error, or a different exception type naming it, is not."""
    answer = run_script(framework_python, OOM)
    name, message, oom = answer["real"]  # type: ignore[misc]
    assert name == "JaxRuntimeError" and message.startswith("RESOURCE_EXHAUSTED") and oom is True, answer
    assert answer["made"] is True and answer["wrapped"] is True
    assert answer["other"] is False and answer["plain"] is False


DEVICE = """
import json, jax
from dlbench.backends.jax.backend import JaxBackend
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

spec = PointSpec(framework="jax", model="alexnet", batch_size=1, protocol=Protocol(0, 1, 1, "median"), input_size=64)
backend = JaxBackend()
trainer = backend.build(spec, get_case("alexnet"), RankContext(local_rank=3, local_world_size=4))
print(json.dumps({"device": trainer.device.id, "visible": len(jax.local_devices()), "fact": backend.facts()["device"]}))
"""


def test_the_rank_context_picks_the_device(framework_python: str) -> None:
    """Local rank 3 with two visible devices takes device 3 mod 2 = 1 (two CPU devices stand in for GPUs)."""
    answer = run_script(framework_python, DEVICE, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert answer["visible"] == 2 and answer["device"] == 1, answer


# --- gpu-b: flax's default BatchNorm, as the Flax ImageNet example trains ---
BATCHNORM = """
import json, jax, jax.numpy as jnp
import flax.linen as nn
from dlbench.backends.jax.models import build_module
from dlbench.cases import get_case

seen = set()
def spy(next_fun, args, kwargs, context):
    if isinstance(context.module, nn.BatchNorm):
        seen.add(context.module.use_fast_variance)
    return next_fun(*args, **kwargs)

out = {}
for name, size in (("resnet50", 32), ("inception_v3", 75)):
    seen.clear()
    module = build_module(get_case(name), jnp.float32)
    keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
    with nn.intercept_methods(spy):  # abstract evaluation: every BatchNorm is built, nothing is computed
        jax.eval_shape(lambda x: module.init(keys, x, train=True), jnp.zeros((1, size, size, 3)))
    out[name] = sorted(seen)
print(json.dumps(out))
"""


def test_batchnorm_uses_flax_default_fast_variance(framework_python: str) -> None:
    assert run_script(framework_python, BATCHNORM) == {"resnet50": [True], "inception_v3": [True]}
