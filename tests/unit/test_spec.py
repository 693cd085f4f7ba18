"""Specs check themselves at construction, and survive the trip to the worker."""

from __future__ import annotations

import pytest

from dlbench.spec import PRESETS, PointSpec, Protocol, SpecError, parse_scale, preset


def test_presets_reproduce_the_seeds() -> None:
    assert (PRESETS["caict"].warmup, PRESETS["caict"].steps, PRESETS["caict"].repeats, PRESETS["caict"].statistic) == (
        20,
        100,
        3,
        "mean",
    )
    assert (
        PRESETS["dlperf"].warmup,
        PRESETS["dlperf"].steps,
        PRESETS["dlperf"].repeats,
        PRESETS["dlperf"].statistic,
    ) == (20, 100, 7, "median")
    assert (
        PRESETS["tf_cnn"].warmup,
        PRESETS["tf_cnn"].steps,
        PRESETS["tf_cnn"].repeats,
        PRESETS["tf_cnn"].statistic,
    ) == (10, 100, 5, "mean")
    assert PRESETS["quick"].repeats == 3 and PRESETS["quick"].statistic == "median"


def test_override_keeps_the_rest() -> None:
    p = preset("dlperf").override(steps=10)
    assert (p.warmup, p.steps, p.repeats, p.statistic) == (20, 10, 7, "median")
    with pytest.raises(SpecError, match="unknown preset"):
        preset("nope")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), "batch size"),
        (dict(batch_size=-3), "batch size"),
        (dict(precision="fp4"), "precision must be one of"),  # fp8 is a precision since #35
        (dict(device="tpu"), "device must be one of"),
        (dict(data="real"), "real data needs a data folder"),
        (dict(timeout_s=0), "timeout"),
    ],
)
def test_bad_values_fail_at_construction(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = dict(
        framework="torch", model="resnet50", batch_size=8, protocol=Protocol(1, 1, 1, "median")
    )
    with pytest.raises(SpecError, match=message):
        PointSpec(**{**base, **kwargs})  # type: ignore[arg-type]


def test_json_round_trip_and_key() -> None:
    s = PointSpec(
        framework="torch",
        model="bert_base",
        batch_size=4,
        protocol=preset("quick"),
        precision="amp",
        compile=True,
        nodes=2,
        devices_per_node=4,
    )
    assert PointSpec.from_json(s.to_json()) == s
    assert s.world_size == 8 and s.global_batch == 32 and s.scale == "2n4c"
    assert "timeout_s" not in s.key()


def test_scale_notation() -> None:
    assert parse_scale("2n8c") == (2, 8)
    assert parse_scale("1n1g") == (1, 1)
    with pytest.raises(SpecError, match="scale must look like"):
        parse_scale("8 gpus")
