"""The face case (InsightFace-style): parameter counts from the case parameters, the torch model's exact count,
the modes' rules, and a split classifier whose 2-rank loss and gradients equal the 1-device ones."""

from __future__ import annotations

import dataclasses
import os

import pytest

from dlbench.cases import get_case
from dlbench.cases.face import MODES, param_count
from dlbench.spec import SpecError
from tests.support.gloo_ranks import run_ranks

torch = pytest.importorskip("torch")

from dlbench.backends.torch.face import FaceModel, arcface_loss, shard_bounds  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402


@pytest.mark.parametrize("classes", [1_000, 85_742, 200_001])
def test_count_is_the_formula_and_the_torch_model_has_it(classes: int) -> None:
    case = get_case("face").configured({"classes": classes})
    assert case.param_count == 24_558_144 + 512 * classes == param_count(case.arch)  # type: ignore[arg-type]
    assert count_trainable(build_model(case)) == case.param_count


def test_modes_and_their_rules() -> None:
    for mp, sample in MODES.values():
        case = get_case("face").configured({"model_parallel": mp, "sample": sample, "classes": 5_000})
        assert case.param_count == 24_558_144 + 512 * 5_000  # a mode changes where the classifier lives, not its size
    with pytest.raises(SpecError, match="model_parallel=1"):
        get_case("face").configured({"sample": 10})
    with pytest.raises(SpecError, match="1 to 100"):
        get_case("face").configured({"model_parallel": 1, "sample": 101})


def test_partial_fc_counts_the_sampled_classifier_only() -> None:
    full = get_case("face").configured({"classes": 1_000_000, "model_parallel": 1})
    pfc = get_case("face").configured({"classes": 1_000_000, "model_parallel": 1, "sample": 10})
    classifier = 2 * 3 * 512 * 900_000  # the 900,000 classes a 10% step leaves out, forward + backward
    assert full.train_flops_per_sample(112) - pfc.train_flops_per_sample(112) == pytest.approx(classifier)


def test_shards_cover_the_classes_once() -> None:
    bounds = [shard_bounds(10, r, 3) for r in range(3)]
    assert bounds == [(0, 4), (4, 7), (7, 10)]


def _tiny(sample: int, world: int, rank: int) -> tuple[FaceModel, object]:
    case = get_case("face").configured({"classes": 12, "model_parallel": 1, "sample": sample})
    case = dataclasses.replace(case, arch=dataclasses.replace(case.arch, embedding=8))  # type: ignore[arg-type]
    backbone = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 8))
    return FaceModel(case, backbone, rank, world), case


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"images": torch.randn(6, 3, 4, 4, generator=g), "labels": torch.tensor([0, 5, 11, 3, 7, 5])}


def _rank(rank: int, port: int) -> object:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    full, _ = _tiny(100, 1, 0)  # as the reference below draws it
    model, _ = _tiny(100, 2, rank)
    with torch.no_grad():  # the same weights as the 1-device model: its backbone, and this rank's slice
        model.replicated.load_state_dict(full.replicated.state_dict())
        model.weight.copy_(full.weight[model.lo : model.hi])
    model.replicated = torch.nn.parallel.DistributedDataParallel(model.replicated)
    model.eval()  # batch norm from its running statistics: per-sample, so half batches and the whole agree
    batch = _batch()
    mine = {k: v[rank * 3 : (rank + 1) * 3] for k, v in batch.items()}  # each rank half of the global batch
    loss = arcface_loss(model, mine)
    loss.backward()
    # The process group ends with the rank's process: destroyed here, the DDP reducer's teardown on return could
    # wait on it forever (seen once in five runs beside the GPT layout tests).
    return loss.item(), model.weight.grad.clone(), [p.grad.clone() for p in model.replicated.parameters()]


def test_split_classifier_on_two_ranks_equals_one_device() -> None:
    """Model parallel: the loss over the global batch and every gradient (the shards' and, after DDP's average,
    the backbone's) are those of one device holding all 12 classes."""
    results = run_ranks(_rank, 2)
    torch.manual_seed(0)
    full, _ = _tiny(100, 1, 0)
    loss = arcface_loss(full.eval(), _batch())
    loss.backward()
    for rank, (value, shard_grad, backbone_grads) in results.items():
        lo, hi = shard_bounds(12, rank, 2)
        assert value == pytest.approx(loss.item(), rel=1e-5)
        assert torch.allclose(shard_grad, full.weight.grad[lo:hi], atol=1e-6)
        for mine, ref in zip(backbone_grads, [p.grad for p in full.replicated.parameters()]):
            assert torch.allclose(mine, ref, atol=1e-6)


def test_partial_fc_keeps_every_positive_class() -> None:
    """A 50% step on one device: 6 of 12 classes, the batch's 5 distinct labels among them; the loss trains."""
    torch.manual_seed(0)
    model, _ = _tiny(50, 1, 0)
    loss = arcface_loss(model, _batch())
    loss.backward()
    used = (model.weight.grad.abs().sum(dim=1) > 0).nonzero().squeeze(1).tolist()
    assert len(used) == 6 and {0, 3, 5, 7, 11} <= set(used)


@pytest.mark.parametrize(("mp", "sample"), [(0, 100), (1, 10)])
def test_flops_agree_with_torch_flop_counter(mp: int, sample: int) -> None:
    """The backbone, embedding and the classes a step uses (Partial FC: 10%), as FlopCounterMode counts one forward +
    backward (the normalisation and margin are element-wise, counted by neither)."""
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.backends.torch.models import train_loss

    case = get_case("face").configured({"classes": 20_000, "model_parallel": mp, "sample": sample})
    torch.manual_seed(0)
    model = build_model(case).train()
    batch = {"images": torch.randn(2, 3, 64, 64, requires_grad=True), "labels": torch.tensor([1, 19_999])}
    with FlopCounterMode(display=False) as counter:
        train_loss(case, model, batch).backward()
    assert case.train_flops_per_sample(64) == pytest.approx(counter.get_total_flops() / 2, rel=0.02)
