"""FLUX.1's transformer in torch (#48): exactly the case's count (FLUX.1-schnell's on the meta device); patches and
positions as the reference lays them out; the flow-matching loss by its definition; adaLN-Zero's zero start;
the timestep samplers; recomputation changes nothing; FSDP over 2 gloo ranks trains as DDP does (each rank its own
noise); a point records its FLOPs per image and what its step times."""

from __future__ import annotations

import math
from typing import Any

import pytest

from dlbench.cases import get_case
from dlbench.cases.dit import dit_arch
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.context import BuildContext  # noqa: E402
from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.dit import DitModel, flow_matching_loss, patchify, position_ids  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks  # noqa: E402

SMALL = {"side": 8, "single": 2}


def _batch(case: Any, n: int, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    inp = case.input
    return {
        "latents": torch.randn(n, inp.channels, inp.side, inp.side, generator=g),
        "text": torch.randn(n, inp.text_tokens, inp.text_dim, generator=g),
        "pooled": torch.randn(n, inp.pooled_dim, generator=g),
    }


@pytest.mark.parametrize("params", [{}, {"guidance": 1, "double": 1}])
def test_the_model_has_exactly_the_cases_count(params: dict[str, int]) -> None:
    case = get_case("dit_tiny").configured(params)
    assert count_trainable(build_model(case)) == case.param_count


def test_flux1_counts_exactly_on_the_meta_device() -> None:
    assert TorchBackend().count_params(get_case("flux1")) == 11_891_178_560


def test_patches_and_positions_are_row_major() -> None:
    cfg = dit_arch(get_case("dit_tiny"))
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).view(2, 3, 4, 4)
    p = patchify(x, 2)
    assert p.shape == (2, 4, 12)
    assert p[0, 1].tolist() == [x[0, c, i, 2 + j].item() for c in range(3) for i in range(2) for j in range(2)]
    ids = position_ids(cfg, 8, torch.device("cpu"))
    assert ids.shape == (cfg.text_tokens + 16, 3)
    assert ids[: cfg.text_tokens].abs().sum() == 0  # text at position 0
    assert ids[cfg.text_tokens + 5].tolist() == [0.0, 1.0, 1.0]  # token 5 of a 4 x 4 grid: row 1, column 1


def test_the_loss_is_the_velocity_regression_and_starts_at_zero_output() -> None:
    case = get_case("dit_tiny").configured(SMALL)
    model = build_model(case)
    batch = _batch(case, 3)
    t = torch.tensor([0.1, 0.5, 0.9])
    noise = torch.randn_like(batch["latents"])
    loss = flow_matching_loss(model, {**batch, "t": t, "noise": noise})
    x0 = batch["latents"]
    xt = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise
    pred = model(xt, t, batch["text"], batch["pooled"])
    assert float(pred.detach().abs().max()) == 0.0  # adaLN-Zero: the final projection starts at zero
    want = ((pred - patchify(noise - x0, 2)) ** 2).mean()
    torch.testing.assert_close(loss, want)
    loss.backward()  # the zero projection still gets a gradient, so training moves it
    assert float(model.final.weight.grad.abs().sum()) > 0


@pytest.mark.parametrize(("timesteps", "spread"), [(0, (0.25, 0.33)), (1, (0.15, 0.24))])
def test_timestep_samplers(timesteps: int, spread: tuple[float, float]) -> None:
    """U(0, 1) has std 0.289; sigmoid(N(0, 1)) std about 0.21, both in (0, 1)."""
    model = DitModel(dit_arch(get_case("dit_tiny").configured({"timesteps": timesteps})), seed=3)
    t, noise = model.draws(torch.zeros(20000, 1, 2, 2))
    assert 0 < float(t.min()) and float(t.max()) < 1 and abs(float(t.mean()) - 0.5) < 0.01
    assert spread[0] < float(t.std()) < spread[1]
    assert abs(float(noise.std()) - 1) < 0.02


def test_recomputing_the_blocks_changes_nothing() -> None:
    case = get_case("dit_tiny").configured(SMALL)
    batch = {**_batch(case, 2), "t": torch.tensor([0.3, 0.7])}
    batch["noise"] = torch.randn_like(batch["latents"])
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = DitModel(dit_arch(case), recompute=recompute)
        model.train()
        with torch.no_grad():  # leave adaLN-Zero's start, so that every block's gradient is non-zero
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        flow_matching_loss(model, batch).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def test_each_rank_draws_its_own_noise() -> None:
    case = get_case("dit_tiny").configured(SMALL)
    seeds = []
    for rank in (0, 1):
        torch.manual_seed(0)
        seeds.append(build_model(case, BuildContext(rank=rank, world=2)).seed)  # type: ignore[union-attr]
    assert seeds[1] == seeds[0] + 1


STEPS = 3


def _rank(rank: int, port: int, fsdp: bool) -> list[float]:
    spec = PointSpec(
        framework="torch",
        model="dit_tiny",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=2,
        layout=Layout(fsdp=fsdp),
        strategy="none" if fsdp else "ddp",
        case_params=tuple(sorted(SMALL.items())),
    )
    ctx = join_ranks(rank, port, 2)
    backend = TorchBackend()
    assert backend.refuse(spec) is None
    trainer = backend.build(spec, get_case("dit_tiny").configured(SMALL), ctx)
    losses = []
    for _ in range(STEPS):
        trainer.train_step(trainer.next_batch())
        losses.append(trainer.loss())
    if fsdp:
        assert "FSDP2" in str(backend.facts()["data_parallel"])
    trainer.close()
    return losses


def test_fsdp_trains_as_ddp_on_two_ranks() -> None:
    """The same seeds, batches and noise per rank: FSDP2's sharded step equals DDP's replicated one (fp32,
    relative 1e-5: only the order of the gradient sums differs)."""
    fsdp = run_ranks(_rank, 2, True)
    ddp = run_ranks(_rank, 2, False)
    for rank in (0, 1):
        assert fsdp[rank] == pytest.approx(ddp[rank], rel=1e-5)
    assert fsdp[0] != fsdp[1]  # each rank its own samples and noise


def test_a_point_trains_and_records_its_flops_and_what_is_timed() -> None:
    spec = PointSpec(
        framework="torch",
        model="dit_tiny",
        batch_size=4,
        protocol=Protocol(0, 1, 1, "median"),
        converge=True,
        threads=1,
        case_params=tuple(sorted(SMALL.items())),
    )
    backend = TorchBackend()
    trainer = backend.build(spec, get_case("dit_tiny").configured(SMALL), RankContext())
    losses = []
    for _ in range(20):
        trainer.train_step(trainer.next_batch())
        losses.append(trainer.loss())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # the learnable latents: it learns
    dit = backend.facts()["dit"]
    assert isinstance(dit, dict) and dit["image_tokens"] == 16 and dit["timesteps"] == "uniform"
    assert "not the VAE" in str(dit["timed"]) and dit["flops_per_sample"]["model"] > 0
