"""JAX's Llama (#35) over one mesh with data, fsdp and tensor axes (sharding annotations, llama_mesh.py) trains the
same model as one device: over 4 host devices in one process (XLA_FLAGS=--xla_force_host_platform_device_count=4),
each axis alone and in pairs, the losses of 3 AdamW steps on the same global batch and weights equal one device's
within 2e-5 relative (fp32: the partitioner's all-reduces and reduce-scatters sum in another order; measured here
they agree exactly), the model has the case's exact count, and the query kernel is annotated over fsdp x tensor.
The probe (jax_llama_probe.py) runs in the JAX environment; about 90 CPU-seconds."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cases import get_case
from tests.frameworks.jax_llama_probe import MESHES, PARAMS
from tests.support.frameworks import interpreter_or_skip
from tests.support.scaling import assert_ranks_in_sync, stored

CliResult = tuple[int, str, str]

pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]

PROBE = Path(__file__).with_name("jax_llama_probe.py")


def test_the_jax_llama_mesh_trains_as_one_device() -> None:
    python = interpreter_or_skip("jax")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([python, str(PROBE)], capture_output=True, text=True, timeout=900, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    assert out["params"] == get_case("llama_tiny").configured(PARAMS).param_count
    one = out["one"]
    assert one[-1] < one[0]  # it trains
    for name in MESHES:
        assert out[name] == pytest.approx(one, rel=2e-5), name
        assert out[f"{name}_wq"] == "P('fsdp', 'tensor')"


def test_fsdp_is_selectable_from_run_and_its_ranks_stay_in_sync(
    cli: Callable[..., CliResult], store_path: Path
) -> None:
    """`dlbench run -f jax -m llama_tiny --scale 1n2c --fsdp`: two processes on the mesh's fsdp axis (each kernel
    sharded over them, the batch split), their parameters equal after the steps, the mesh recorded."""
    interpreter_or_skip("jax")
    args = ("run", "-f", "jax", "-m", "llama_tiny", "--scale", "1n2c", "--fsdp", "--threads", "1")
    code, _, err = cli(*args, "--steps", "2", "--warmup", "1", "--repeats", "1", "--store", str(store_path))
    assert code == 0, err
    base, r = stored(store_path)
    assert base.status == "ok" and base.spec.world_size == 1
    assert r.spec.layout.fsdp and r.extra["layout"] == "DP2 FSDP"
    assert r.extra["jax_mesh"] == "data 1 x fsdp 2 x tensor 1" and r.extra["jax_processes"] == 2
    assert_ranks_in_sync(r, 2)  # the whole (sharded) parameters' checksum, the same on both processes
