"""JAX's GPT tensor parallel (#23) trains the same model as one device: over a (data, model) mesh of 4 host
devices in one process (XLA_FLAGS=--xla_force_host_platform_device_count=4), 2x2 and 1x4, the losses of 3 Adam
steps on the same global batch and weights equal one device's within 2e-5 relative (fp32: the partitioner's
all-reduces sum in another order), and the fused projection is split by columns over the model axis.
The probe (jax_tp_probe.py) runs in the JAX environment; about 30 CPU-seconds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]

PROBE = Path(__file__).with_name("jax_tp_probe.py")


def test_tensor_parallel_jax_gpt_trains_as_one_device() -> None:
    python = interpreter_or_skip("jax")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([python, str(PROBE)], capture_output=True, text=True, timeout=600, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    one = out["one"]
    assert one[-1] < one[0]  # it trains
    for name in ("2x2", "1x4"):
        assert out[name] == pytest.approx(one, rel=2e-5), name
        assert out[f"{name}_qkv"] == "P(None, 'model')"
