"""The MoE family's refusals (#36), framework-free: one line each from `moe_refusal`, which the central refusal
place calls; through the CLI, exit 2 before anything runs and nothing stored. Also the new spec fields: old
points keep their keys, a scaling baseline drops expert parallelism."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from dlbench.cases.moe_layout import moe_refusal
from dlbench.spec import PointSpec, Protocol, SpecError
from tests.support.specs import flat_spec


def _spec(**kw: object) -> PointSpec:
    base = {"framework": "torch", "model": "moe_tiny", "batch_size": 4, "protocol": Protocol(0, 1, 1, "median")}
    return flat_spec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"devices_per_node": 4, "expert_parallel": 4, "case_params": (("experts", 6),)}, "6 experts do not divide"),
        ({"case_params": (("top_k", 9),)}, "top_k (9) is above the expert count (8)"),
        ({"case_params": (("capacity", 1),)}, "the smallest that routes one is 2 (percent)"),  # 4 x 64 tokens
        ({"model": "llama_tiny", "devices_per_node": 2, "expert_parallel": 2}, "llama_tiny has none"),
        ({"framework": "jax", "devices_per_node": 2, "expert_parallel": 2}, "torch only, not jax"),
        ({"devices_per_node": 2, "expert_parallel": 4}, "does not divide the point's 2 device(s)"),
        ({"devices_per_node": 4, "expert_parallel": 2, "tensor_parallel": 2}, "data parallelism only"),
        ({"devices_per_node": 2, "expert_parallel": 2, "strategy": "allreduce"}, "strategy allreduce"),
        ({"devices_per_node": 2, "expert_parallel": 2, "strategy": "ddp"}, "strategy ddp"),
        ({"model": "resnet50", "routing": "balanced"}, "resnet50 has none"),
        ({"framework": "paddle", "routing": "balanced"}, "--routing balanced is wired for torch only, not paddle"),
    ],
)
def test_what_a_moe_cannot_run_is_refused_in_one_line(fields: dict[str, object], message: str) -> None:
    reason = moe_refusal(_spec(**fields)) or ""
    assert message in reason and "\n" not in reason


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"case_params": (("capacity", 4),)},  # floor(0.04 x 256 x 2 / 8) = 2: routes
        {"devices_per_node": 2, "expert_parallel": 2},
        {"devices_per_node": 4, "expert_parallel": 2},
        {"devices_per_node": 4, "expert_parallel": 4, "routing": "balanced"},
        {"model": "llama_tiny", "devices_per_node": 2},
        {"framework": "paddle", "devices_per_node": 2},  # paddle's data parallel (#46)
    ],
)
def test_what_the_family_can_run_passes(fields: dict[str, object]) -> None:
    assert moe_refusal(_spec(**fields)) is None


def test_the_new_fields_keep_old_keys_and_a_baseline_drops_them() -> None:
    from dlbench.analysis.scaling import baseline_spec

    plain = _spec(devices_per_node=2)
    assert "expert_parallel" not in plain.key() and "routing" not in plain.key()
    ep = _spec(devices_per_node=2, expert_parallel=2, routing="balanced")
    assert ep.key() != plain.key() and PointSpec.from_json(ep.to_json()) == ep
    assert baseline_spec(ep).layout.expert_parallel == 1 and baseline_spec(ep).layout.routing == "learned"
    with pytest.raises(SpecError, match="expert parallel must be a whole number"):
        _spec(expert_parallel=0)
    with pytest.raises(SpecError, match="routing"):
        _spec(routing="even")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--expert-parallel", "3", "--scale", "1n2c"), "does not divide the point's 2 device(s)"),
        (("--param", "top_k=9"), "top_k (9) is above the expert count (8)"),
        (("--param", "capacity=1", "-b", "1"), "the smallest that routes one is 7 (percent)"),
        (("-m", "llama_tiny", "--expert-parallel", "2", "--scale", "1n2c"), "llama_tiny has none"),
    ],
)
def test_the_cli_refuses_before_anything_runs(
    cli: Callable[..., tuple[int, str, str]], tmp_path: object, args: tuple[str, ...], message: str
) -> None:
    store = f"{tmp_path}/r.db"
    code, _, err = cli("run", "-f", "torch", "-m", "moe_tiny", "--device", "cpu", "--store", store, *args)
    assert code == 2 and message in " ".join(err.split())
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(store)
