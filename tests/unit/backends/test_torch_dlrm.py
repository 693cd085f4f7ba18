"""DLRMv2 in torch (#47): the model has the case's exact count (dlrm_v2 on the meta device); the cross layer is
DCNv2's formula; a point built as the backend builds it trains on the planted clicks; and at 2 gloo ranks both
embedding layouts, data parallel (DDP, sparse table gradients) and table-wise model parallel (all-to-all), give one
device's loss on the same global batch and initial weights at every one of 3 Adagrad steps.

Tolerance (fp32): relative 1e-5 of the loss. The layouts sum the same products in another order (the averaged
gradients, the exchanged pooled vectors); a table on the wrong rank, an unscaled table gradient or a feature out of
order moves the loss by 1e-3 or more at the first step after the update. Adagrad, the case's optimizer, divides
each gradient by its own running norm, so it cannot see a gradient scaled by a constant (a table gradient summed
over the ranks instead of averaged): the layouts are compared under SGD too, which does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dlbench.cases import Case, Optimizer, get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.dlrm import CrossNet, Dlrm, owner  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from dlbench.data.recsys import synthetic_dlrm  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks, step_losses  # noqa: E402

GLOBAL_BATCH, STEPS, REL = 16, 3, 1e-5
SMALL = {"cap": 50}  # tables of at most 50 rows: quick on 2 shared cores


@pytest.mark.parametrize("name", ["dlrm_v2", "dlrm_tiny"])
def test_the_model_has_the_case_count(name: str) -> None:
    case = get_case(name)
    with torch.device("meta"):  # dlrm_v2's tables hold 26 billion parameters
        assert count_trainable(build_model(case)) == case.param_count


def test_the_cross_layer_is_dcn_v2s() -> None:
    torch.manual_seed(0)
    net = CrossNet(6, 1, 2)
    for p in net.parameters():
        torch.nn.init.normal_(p)
    x0 = torch.randn(3, 6)
    w, v, b = net.W[0], net.V[0], net.bias[0]
    assert torch.allclose(net(x0), x0 * (x0 @ v.T @ w.T + b) + x0, atol=1e-5)


def _spec(world: int, sharding: int, batch: int, converge: bool = False) -> PointSpec:
    params = {**SMALL, "sharding": sharding}
    return PointSpec(
        framework="torch",
        model="dlrm_tiny",
        batch_size=batch,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=world,
        converge=converge,
        case_params=tuple(sorted(params.items())),
    )


def _global_batch() -> dict[str, Any]:
    arrays = synthetic_dlrm(get_case("dlrm_tiny").configured(SMALL).arch, GLOBAL_BATCH, seed=5)  # type: ignore[arg-type]
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def test_one_device_trains_and_its_point_records_its_figures() -> None:
    spec = _spec(1, 0, GLOBAL_BATCH)
    backend = TorchBackend()
    trainer = backend.build(spec, get_case("dlrm_tiny").configured(spec.params), RankContext())
    losses = step_losses(trainer, _global_batch(), 8)
    assert losses[-1] < losses[0]
    facts = backend.facts()
    assert facts["dlrm"]["lookups_per_sample"] == 214  # type: ignore[index]
    assert facts["loader"] == "synthetic: 8 batches made on the device, fed in turn"


def _case(spec: PointSpec, optimizer: str) -> Case:
    case = get_case("dlrm_tiny").configured(spec.params)
    return case if optimizer == "adagrad" else dataclasses.replace(case, optimizer=Optimizer("sgd", lr=0.5))


def _rank(rank: int, port: int, sharding: int, optimizer: str) -> tuple[list[float], list[int]]:
    ctx = join_ranks(rank, port, 2)
    spec = _spec(2, sharding, GLOBAL_BATCH // 2)
    backend = TorchBackend()
    assert backend.refuse(spec) is None
    trainer = backend.build(spec, _case(spec, optimizer), ctx)
    n = spec.batch_size
    mine = {k: v[rank * n : (rank + 1) * n] for k, v in _global_batch().items()}
    losses = step_losses(trainer, mine, STEPS)
    model = getattr(trainer.model, "module", trainer.model)
    tables = [int(k) for k in model.tables]  # type: ignore[union-attr]
    trainer.close()
    return losses, tables


def _one_device(optimizer: str) -> list[float]:
    spec = _spec(1, 0, GLOBAL_BATCH)
    trainer = TorchBackend().build(spec, _case(spec, optimizer), RankContext())
    return step_losses(trainer, _global_batch(), STEPS)


@pytest.mark.parametrize(
    ("sharding", "optimizer"),
    [(0, "sgd"), (1, "sgd"), (1, "adagrad")],
    ids=["data_parallel_sgd", "table_wise_sgd", "table_wise_adagrad"],
)
def test_two_ranks_give_one_devices_loss(sharding: int, optimizer: str) -> None:
    one_device = _one_device(optimizer)
    out = run_ranks(_rank, 2, sharding, optimizer)
    assert one_device[-1] != pytest.approx(one_device[0], rel=1e-3)  # the steps moved the weights
    for step in range(STEPS):
        mean = sum(out[r][0][step] for r in range(2)) / 2  # each rank's loss is its half's mean
        assert mean == pytest.approx(one_device[step], rel=REL)
    if sharding:
        assert out[0][1] == [f for f in range(26) if owner(f, 2) == 0] and out[1][1] == list(range(1, 26, 2))
    else:
        assert out[0][1] == out[1][1] == list(range(26))


def test_a_rank_holds_only_its_tables() -> None:
    case = get_case("dlrm_tiny").configured({"sharding": 1})
    assert sorted(int(k) for k in Dlrm(case, rank=1, world=2).tables) == list(range(1, 26, 2))
    assert len(Dlrm(get_case("dlrm_tiny"), rank=1, world=2).tables) == 26  # data parallel: every table
