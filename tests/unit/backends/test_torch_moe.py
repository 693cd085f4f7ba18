"""The torch MoE decoder (#36): its parameters are exactly cases/moe.py's count (Mixtral's on the meta device), its
routed layer computes what a token-by-token reference does (dropless, and with a capacity that drops), the
auxiliary loss is Switch's, and a one-device point trains and records its routing figures and the host reads of
its step (#40)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from dlbench.cases import get_case
from dlbench.cases.moe import active_param_count, moe_arch
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from dlbench.backends.torch.moe import MoeFeedForward, moe_layers, routing_figures, set_balanced  # noqa: E402
from tests.support.host_reads import counted_host_reads  # noqa: E402


@pytest.mark.parametrize("params", [{}, {"shared_experts": 2}, {"gate": 1, "experts": 4, "top_k": 1}])
def test_the_model_has_exactly_the_cases_count(params: dict[str, int]) -> None:
    case = get_case("moe_tiny").configured(params)
    assert count_trainable(build_model(case)) == case.param_count


def test_mixtral_counts_exactly_on_the_meta_device() -> None:
    case = get_case("mixtral_8x7b")
    assert TorchBackend().count_params(case) == 46_702_792_704
    assert active_param_count(moe_arch(case)) == 12_879_925_248


def _reference(layer: MoeFeedForward, t: torch.Tensor, capacity: int | None) -> torch.Tensor:
    """Token by token: the gate-weighted sum of its top_k experts (an expert past its capacity skipped)."""
    cfg = layer.cfg
    logits = layer.router(t).float()
    scores = logits.softmax(-1) if cfg.gating == "softmax" else logits.sigmoid()
    weights, chosen = scores.topk(cfg.top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    taken = [0] * cfg.num_experts
    out = torch.zeros_like(t)
    for i in range(t.shape[0]):
        for j in range(cfg.top_k):
            e = int(chosen[i, j])
            taken[e] += 1
            if capacity is not None and taken[e] > capacity:
                continue
            out[i] += weights[i, j] * layer.experts[str(e)](t[i : i + 1])[0]
    return out


@pytest.mark.parametrize("gate", [0, 1])
def test_dropless_routing_matches_a_token_by_token_reference(gate: int) -> None:
    torch.manual_seed(0)
    layer = moe_layers(build_model(get_case("moe_tiny").configured({"gate": gate})))[0]
    t = torch.randn(24, layer.cfg.base.hidden_size)
    with torch.no_grad():
        got, want = layer(t[None])[0], _reference(layer, t, None)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert int(layer.dropped) == 0 and int(layer.assignments) == 24 * 2
    assert int(layer.tokens_per_expert.sum()) == 48


def test_a_capacity_drops_the_assignments_past_it_and_counts_them() -> None:
    torch.manual_seed(1)
    layer = moe_layers(build_model(get_case("moe_tiny").configured({"capacity": 50})))[0]
    t = torch.randn(32, layer.cfg.base.hidden_size)
    capacity = math.floor(0.5 * 32 * 2 / 8)  # 4 assignments per expert
    with torch.no_grad():
        got, want = layer(t[None])[0], _reference(layer, t, capacity)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    per_expert = layer.tokens_per_expert.tolist()
    assert int(layer.dropped) == sum(max(0, c - capacity) for c in per_expert) > 0


def test_the_aux_loss_is_one_under_a_uniform_router() -> None:
    layer = moe_layers(build_model(get_case("moe_tiny")))[0]
    with torch.no_grad():
        layer.router.weight.zero_()  # P_i = 1/E whatever the choice: E x sum_i f_i / E = 1
        layer(torch.randn(1, 16, layer.cfg.base.hidden_size))
    assert float(layer.aux_loss) == pytest.approx(1.0)


def test_forced_balanced_routing_is_even_and_marked() -> None:
    model = build_model(get_case("moe_tiny"))
    set_balanced(model, True)
    with torch.no_grad():
        model(torch.randint(0, 512, (2, 64)))
    figures = routing_figures(model)
    assert figures["forced_balanced"] is True
    assert figures["imbalance_max"] == 1.0


def test_a_one_device_point_trains_and_records_routing() -> None:
    spec = PointSpec(framework="torch", model="moe_tiny", batch_size=4, protocol=Protocol(0, 1, 1, "median"))
    backend = TorchBackend()
    case = get_case("moe_tiny")
    trainer = backend.build(spec, case, RankContext())
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 512, (4, 65), generator=g)
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    losses = []
    for _ in range(4):
        trainer.train_step(batch)
        losses.append(trainer.loss())
    assert losses[-1] < losses[0]
    facts = backend.facts()
    moe = facts["moe"]
    assert isinstance(moe, dict) and moe["params_active"] == active_param_count(moe_arch(case))
    assert moe["capacity"] == "dropless"
    routing = facts["routing"]
    assert isinstance(routing, dict)
    hist = routing["tokens_per_expert"]
    assert [sum(row) for row in hist] == [4 * 64 * 2 * 4] * 2  # every step's assignments, per layer
    assert routing["dropped_fraction"] == 0.0 and routing["imbalance_max"] >= 1.0


def test_a_balanced_routing_point_is_forced_and_says_so() -> None:
    spec = PointSpec(
        framework="torch",
        model="moe_tiny",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        layout=Layout(routing="balanced"),
    )
    backend = TorchBackend()
    trainer = backend.build(spec, get_case("moe_tiny"), RankContext())
    ids = torch.randint(0, 512, (2, 65))
    trainer.train_step({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    routing = backend.facts()["routing"]
    assert isinstance(routing, dict) and routing["forced_balanced"] is True and routing["imbalance_max"] == 1.0


SMALL = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "expert_ffn": 32, "vocab": 128, "seq": 8}


def _fused(trainer: Any, case: Any, batch: int) -> None:
    """The trainer's optimizer as on a GPU: fused AdamW, which keeps its step counts on the device (the CPU's
    default foreach AdamW reads each step count on the host, which a GPU point never does)."""
    from dlbench.backends.torch.step import make_optimizer

    trainer.optimizer = make_optimizer(case, trainer.model, batch, fused=True)


@pytest.mark.parametrize("params", [{}, {"capacity": 50}])
def test_the_step_reads_the_host_only_as_recorded(params: dict[str, int]) -> None:
    """#40: the MoE step's host reads (Tensor.item/tolist/cpu counted) over 3 steps after a warm-up are exactly
    the recorded host_sync_per_step: one per MoE layer (the dropless dispatch's split sizes); the routing counters
    are read once, after timing. A capacity factor adds one per layer torch makes itself (a boolean index, not
    one of the counted methods), and the record says so."""
    spec = PointSpec(
        framework="torch",
        model="moe_tiny",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=tuple(sorted({**SMALL, **params}.items())),
    )
    backend = TorchBackend()
    case = get_case("moe_tiny").configured(spec.params)
    trainer = backend.build(spec, case, RankContext())
    _fused(trainer, case, 2)
    ids = torch.randint(0, SMALL["vocab"], (2, SMALL["seq"] + 1), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    trainer.train_step(batch)  # warm-up
    with counted_host_reads() as reads:
        for _ in range(3):
            trainer.train_step(batch)
    facts = backend.facts()
    recorded = facts["host_sync_per_step"]
    assert isinstance(recorded, dict) and recorded["layers"] == SMALL["layers"]
    per_layer = 2 if params else 1
    assert recorded["count"] == per_layer * SMALL["layers"]
    assert reads == {"item": 0, "tolist": 3 * SMALL["layers"], "cpu": 0}  # the dispatch's reads, nothing else
    assert ("capacity factor" in str(recorded["why"])) == bool(params)


def test_routing_and_counting_read_nothing_on_the_host() -> None:
    """Everything in a MoE layer but the dispatch's split sizes runs without a data-dependent (host) read: under
    FakeTensorMode, where any such read raises (torch.bincount did: its output size is the input's maximum)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cfg = moe_arch(get_case("moe_tiny").configured(SMALL))
    layer = MoeFeedForward(cfg, exchange=lambda x, counts, layer: x * 1)  # the experts skipped: no split sizes
    with FakeTensorMode(allow_non_fake_inputs=True):
        out = layer(torch.randn(2, SMALL["seq"], SMALL["hidden"]))
        out.sum().backward()
    assert tuple(out.shape) == (2, SMALL["seq"], SMALL["hidden"])
