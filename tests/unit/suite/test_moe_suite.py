"""The moe-cpu suite (#36): its layouts carry expert parallelism and capacity into the points' specs, and every
point is one the central refusal place lets run."""

from __future__ import annotations

from dlbench import suite
from dlbench.refusals import refusal
from dlbench.suite.expand import expand


def test_moe_cpu_expands_to_expert_parallel_points_that_can_run() -> None:
    points = expand(suite.load("moe-cpu"), "cpu", "/d")
    by_group = {p.batch_group: p.spec for p in points}
    assert {g: (s.world_size, s.layout.expert_parallel) for g, s in by_group.items()} == {
        "one": (1, 1),
        "ep2": (2, 2),
        "ep4": (4, 4),
        "ep2_dp2": (4, 2),
        "one_cap100": (1, 1),
        "ep2_cap100": (2, 2),
    }
    assert by_group["ep2_cap100"].params == {"capacity": 100}
    assert all(s.layout.routing == "learned" for s in by_group.values())
    assert [refusal(s) for s in by_group.values()] == [None] * 6


def test_the_gpu_twin_expands_to_expert_parallel_points_that_can_run() -> None:
    points = expand(suite.load("moe-h100"), "cuda", "/d")
    specs = {p.batch_group: p.spec for p in points}
    assert {g: (s.world_size, s.layout.expert_parallel) for g, s in specs.items()} == {
        "mixtral_l2_ep1": (1, 1),
        "mixtral_l2_ep2_dp4": (8, 2),
        "mixtral_l2_ep4_dp2": (8, 4),
        "mixtral_l2_ep8": (8, 8),
    }
    assert all(s.params == {"layers": 2} and s.precision == "bf16" for s in specs.values())
    assert [refusal(s) for s in specs.values()] == [None] * 4
