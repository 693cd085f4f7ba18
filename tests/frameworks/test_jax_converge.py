"""JAX under --converge (#34): a convergence point trains on the learnable data to its case's own target, and the
trainer's loss curve is summed on the device and read once per window.

Each check runs in the jax environment's interpreter (a worker, or a snippet), so this file never imports jax;
without that environment every test skips, naming it (`dlbench setup jax`). The point is llama_tiny (1M
parameters) on the Markov source at a 16-token sequence: on this 2-core VM it reaches the case's target (its
entropy rate + 0.25) in about 630 steps and 35 CPU-seconds. Its reference band (torch) is not measured here: torch
takes several CPU-minutes for the same curve; the verdict is the one the controller gives with no reference.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dlbench.analysis.convergence import CURVE_KEY, judge
from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.protocol.converge import Curve
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import read_result

pytestmark = [pytest.mark.framework("jax")]


@pytest.mark.slow
def test_a_jax_convergence_point_reaches_its_target(framework_python: str, tmp_path: Path) -> None:
    """llama_tiny through the worker with --converge, at the case's own target and budget: `converged`, a curve
    read every 10 steps that falls, then the throughput measured as usual. Before JAX's AdamW decoupled its
    weight decay this curve stalled near 3.8 nats, far above the target (`not reached` in its 1000 steps)."""
    spec = PointSpec(
        framework="jax",
        model="llama_tiny",
        batch_size=8,
        input_size=16,
        protocol=Protocol(0, 2, 1, "median"),
        converge=True,
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [framework_python, "-m", "dlbench.worker", str(tmp_path / "spec.json"), str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(tmp_path / "result.json")
    assert result.status == "ok", result.error
    assert str(result.facts["loader"]).startswith("learnable")
    raw = result.facts[CURVE_KEY]
    assert isinstance(raw, dict)
    curve, target = Curve.from_dict(raw), target_for(get_case("llama_tiny"))
    assert target is not None and raw["target"]["loss"] == target.loss and curve.every == target.every
    judged = judge(curve, target.loss)
    assert judged.verdict == "converged", (judged.reason, curve.losses)
    assert len(curve.losses) >= 5 and curve.losses[-1] <= target.loss < curve.losses[0]
    assert curve.steps == judged.steps_to_target and curve.steps < target.budget
    assert list(curve.wall_s) == sorted(curve.wall_s) and curve.wall_s[0] > 0


WINDOW = """
import json
import jax
import jax.numpy as jnp
from dlbench.backends.jax.step import JaxTrainer

losses = [9.0, 7.0, 0.5, 1.5, 4.0, 2.0, 6.0]
step = jax.jit(lambda state, batch: (state + 1, batch["loss"]))  # a stand-in step: its loss is the batch's
batches = iter({"loss": jnp.asarray(v, jnp.float32)} for v in losses)
trainer = JaxTrainer(batches, jnp.zeros((), jnp.int32), step, jax.devices("cpu")[0])
out = {}
for _ in range(2):  # timed steps: nothing kept
    trainer.train_step(trainer.next_batch())
out["kept_when_off"] = trainer._window_sum is not None
trainer.keep_loss_window = True
for _ in range(3):
    trainer.train_step(trainer.next_batch())
out["on_device"] = isinstance(trainer._window_sum, jax.Array)  # the running sum is a device value, not a float
out["first"] = trainer.loss_window()
out["empty"] = trainer.loss_window()  # no step since: the last step's loss
for _ in range(2):
    trainer.train_step(trainer.next_batch())
out["second"] = trainer.loss_window()
print(json.dumps(out))
"""


def test_loss_window_is_the_mean_of_a_sum_kept_on_the_device(framework_python: str) -> None:
    """JaxTrainer.loss_window: the mean of the window's losses, their running sum a device array until the read
    (JAX's transfer guard cannot prove the absence of a host read here: it does not guard the CPU), reset after
    each read; nothing is kept in timed steps."""
    proc = subprocess.run([framework_python, "-c", WINDOW], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["kept_when_off"] is False and out["on_device"] is True
    assert out["first"] == pytest.approx((0.5 + 1.5 + 4.0) / 3)
    assert out["empty"] == pytest.approx(4.0)
    assert out["second"] == pytest.approx((2.0 + 6.0) / 2)
