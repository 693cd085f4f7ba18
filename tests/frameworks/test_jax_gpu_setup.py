"""What the JAX backend hands XLA's CUDA plugin (memory fraction, preallocation, visible devices) and how often
its fp16 step compiles, from a script in the jax environment with NVML faked at pynvml; skipped, naming it,
where that environment is absent."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "XLA_CLIENT_MEM_FRACTION",
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
            "XLA_PYTHON_CLIENT_PREALLOCATE",
            "CUDA_VISIBLE_DEVICES",
        )
    }
    env["PYTHONPATH"] = os.pathsep.join([str(Path(dlbench.__file__).parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [python, "-c", JAX_GPU_SETUP], capture_output=True, text=True, timeout=300, env=env, check=False
    )
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
    for user in (
        {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"},
        {"XLA_CLIENT_MEM_FRACTION": "0.6"},
        {"XLA_CLIENT_MEM_FRACTION": "0.6", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
    ):
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
