"""MLPerf's workloads (#47) in JAX: LoRA's adapters have the case's exact trainable count, start at the base
model's output and are all that moves; DLRM tiny has its exact count, trains, and is scored by held-out AUC. The
probe (jax_mlperf_probe.py) runs in the JAX environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dlbench.cases import get_case
from tests.frameworks.jax_mlperf_probe import PARAMS
from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]

PROBE = Path(__file__).with_name("jax_mlperf_probe.py")


def test_jax_lora_and_dlrm() -> None:
    python = interpreter_or_skip("jax")
    proc = subprocess.run([python, str(PROBE)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["lora_count"] == get_case("llama_tiny").configured(PARAMS).param_count
    assert out["starts_at_base"] < 1e-5
    assert out["frozen_moved"] == 0 and out["adapters_moved"] > 0
    assert out["dlrm_count"] == get_case("dlrm_tiny").param_count
    assert out["dlrm_losses"][-1] < out["dlrm_losses"][0]
    assert 0.0 <= out["dlrm_auc"] <= 1.0
