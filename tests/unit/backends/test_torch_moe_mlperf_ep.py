"""Expert parallelism (#36) trains DeepSeek-V3's and GPT-OSS's tiny shapes (#48) as one device does: over 2 gloo
ranks, each built by the torch backend as a point builds it, the mean of the ranks' losses equals one device's on
the same global batch and initial weights at each of 3 AdamW steps, and the first step's gradients are one
device's. With the auxiliary loss and the bias balance off (the issue's check), and for DeepSeek with both on:
its auxiliary loss is per sequence (so a batch split over ranks gives the same mean) and the bias balance sums
the step's loads over every rank before it moves the biases, so both keep the equality; the biases then agree
with one device's.

Tolerance (fp32): relative 2e-5 of the loss, as test_torch_moe_ep.py (the exchange moves rows without arithmetic;
the order of sums differs). A bias moved on one rank's load only, or an auxiliary loss over the wrong tokens,
would differ by far more after the first update.
"""

from __future__ import annotations

from typing import Any

import pytest

from dlbench.cases import Case, get_case
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.moe import moe_layers  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks, token_batch  # noqa: E402

SHAPE = {"hidden": 32, "vocab": 128, "seq": 8}
GLOBAL_BATCH, STEPS, REL = 8, 3, 2e-5
POINTS = {  # name: (model, case parameters)
    "deepseek_off": ("deepseek_tiny", {**SHAPE, "aux": 0, "bias_rate": 0}),
    "deepseek_on": ("deepseek_tiny", {**SHAPE, "aux": 100, "bias_rate": 10000}),  # 0.01 and a visible 1.0 step
    "gpt_oss": ("gpt_oss_tiny", {**SHAPE, "window": 4}),
}


def _case(name: str) -> Case:
    model, params = POINTS[name]
    return get_case(model).configured(params)


def _spec(name: str, devices: int) -> PointSpec:
    model, params = POINTS[name]
    return PointSpec(
        framework="torch",
        model=model,
        batch_size=GLOBAL_BATCH // devices,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        layout=Layout(expert_parallel=devices),
        case_params=tuple(sorted(params.items())),
    )


def _train(trainer: Any, batch: dict[str, Any]) -> tuple[list[float], dict[str, Any], list[Any]]:
    """Losses of STEPS steps, the first step's gradients by name, and the routing biases at the end."""
    losses, grads = [], {}
    for step in range(STEPS):
        trainer.train_step(batch)
        losses.append(trainer.loss())
        if step == 0:
            grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return losses, grads, [m.score_bias.clone() for m in moe_layers(trainer.model)]


def _rank(rank: int, port: int, name: str) -> tuple[list[float], dict[str, Any], list[Any]]:
    spec = _spec(name, 2)
    ctx = join_ranks(rank, port, spec.world_size)
    backend = TorchBackend()
    assert backend.refuse(spec) is None
    trainer = backend.build(spec, _case(name), ctx)
    n = spec.batch_size
    batch = token_batch(SHAPE["vocab"], SHAPE["seq"], GLOBAL_BATCH)
    out = _train(trainer, {k: v[rank * n : (rank + 1) * n] for k, v in batch.items()})
    trainer.close()
    return out


@pytest.mark.parametrize("name", list(POINTS))
def test_expert_parallel_trains_as_one_device(name: str) -> None:
    spec = PointSpec(
        framework="torch",
        model=POINTS[name][0],
        batch_size=GLOBAL_BATCH,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=tuple(sorted(POINTS[name][1].items())),
    )
    one = _train(
        TorchBackend().build(spec, _case(name), RankContext()), token_batch(SHAPE["vocab"], SHAPE["seq"], GLOBAL_BATCH)
    )
    results = run_ranks(_rank, 2, name)
    mean = [sum(r[0][i] for r in results.values()) / 2 for i in range(STEPS)]
    assert mean == pytest.approx(one[0], rel=REL)
    assert one[0][-1] < one[0][0]  # it trains
    for rank, (_, grads, biases) in results.items():
        assert any(".experts." in n for n in grads)
        for n, g in grads.items():
            torch.testing.assert_close(g, one[1][n], rtol=1e-4, atol=1e-7, msg=f"rank {rank} of {name}: {n}")
        for mine, want in zip(biases, one[2], strict=True):
            torch.testing.assert_close(mine, want)
    if name == "deepseek_on":
        assert any(bool(b.abs().sum() > 0) for b in one[2])  # the balance moved the biases
