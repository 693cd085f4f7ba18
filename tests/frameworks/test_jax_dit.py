"""JAX's FLUX.1 transformer (#48) against torch's: the torch backend's dit_tiny (one double and one single block,
its init perturbed so that every block contributes) and its velocity on given inputs are written to a file; the
JAX transformer, loaded with those weights, gives the same velocity (fp32, 1e-4 of its scale: the two frameworks'
kernels sum in other orders). The JAX model has the exact counts (dit_tiny's shape, FLUX.1-schnell's and -dev's),
starts at zero output with its target the drawn noise minus the latents, and trains on the learnable latents. The
probe (jax_dit_probe.py) runs in the JAX environment, its model jitted; about 25 CPU-seconds, most of it XLA's
compile (100 s of wall time at load 10-12 on 2 cores; 160 s with the velocity and init run eagerly)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dlbench.cases import get_case
from tests.frameworks.jax_dit_probe import PARAMS
from tests.support.frameworks import interpreter_or_skip

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]

PROBE = Path(__file__).with_name("jax_dit_probe.py")


def _torch_side(path: Path) -> None:
    """dit_tiny's torch weights (perturbed off adaLN-Zero), inputs and velocity, to `path`."""
    from dlbench.backends.torch.dit import DitModel
    from dlbench.cases.dit import dit_arch

    torch.manual_seed(0)
    model = DitModel(dit_arch(get_case("dit_tiny").configured(PARAMS)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    xt, t = torch.randn(3, 16, 8, 8, generator=g), torch.tensor([0.1, 0.5, 0.95])
    text, pooled = torch.randn(3, 8, 64, generator=g), torch.randn(3, 32, generator=g)
    with torch.no_grad():
        velocity = model(xt, t, text, pooled)
    arrays = {n: p.detach().numpy() for n, p in model.named_parameters()}
    inputs = {"xt": xt, "t": t, "text": text, "pooled": pooled, "velocity": velocity}
    np.savez(path, **arrays, **{k: v.numpy() for k, v in inputs.items()})


def test_the_jax_dit_computes_torchs_velocity_and_trains(tmp_path: Path) -> None:
    python = interpreter_or_skip("jax")
    weights = tmp_path / "dit.npz"
    _torch_side(weights)
    proc = subprocess.run([python, str(PROBE), str(weights)], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    case = get_case("dit_tiny").configured(PARAMS)
    assert out["params"] == out["init_params"] == case.param_count
    assert (out["flux1"], out["flux1_dev"]) == (11_891_178_560, 11_901_408_320)
    assert out["velocity_scale"] > 0.1 and out["max_abs_diff"] < 1e-4 * out["velocity_scale"]
    assert out["starts_at_zero"] and out["target_ok"]
    losses = out["losses"]
    assert all(np.isfinite(losses)) and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert out["facts"]["image_tokens"] == 16 and "not the VAE" in out["facts"]["timed"]
