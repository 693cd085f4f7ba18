"""The Llama family's layout refusals (#35), framework-free: one line each from `llama_layout_refusal`, the one
function the central refusal place calls; and through the CLI, exit 2 before anything runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cases.llama_layout import CP_CUDA_ONLY, JAX_NO_PIPELINE, llama_layout_refusal
from dlbench.spec import PointSpec, Protocol, SpecError
from tests.support.specs import flat_spec


def _spec(**kw: object) -> PointSpec:
    base = {"framework": "torch", "model": "llama_tiny", "batch_size": 4, "protocol": Protocol(0, 1, 1, "median")}
    return flat_spec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"context_parallel": 2, "devices_per_node": 2}, "GPU only, not on the CPU"),
        ({"context_parallel": 2, "devices_per_node": 2, "device": "cuda"}, "not wired in dlbench yet"),
        ({"fsdp": True, "model": "resnet50", "devices_per_node": 2}, "llama and DiT cases only, not resnet50"),
        ({"fsdp": True}, "has one"),
        ({"fsdp": True, "devices_per_node": 2, "framework": "tf"}, "wired for torch and jax only, not tf"),
        ({"devices_per_node": 2, "pipeline_parallel": 2, "framework": "jax"}, "no pipeline-parallel schedule"),
        ({"devices_per_node": 2, "fsdp": True, "framework": "jax", "strategy": "ps"}, "shards the batch itself"),
        ({"devices_per_node": 8, "tensor_parallel": 8, "framework": "jax"}, "4 key/value heads do not split over 8"),
        (
            {"devices_per_node": 3, "fsdp": True, "framework": "jax", "case_params": (("hidden", 64),)},
            "64 hidden units over 3 ranks",
        ),
        ({"fsdp": True, "devices_per_node": 2, "tensor_parallel": 2}, "has one"),
        ({"fsdp": True, "devices_per_node": 2, "strategy": "ddp"}, "leave --strategy at none"),
        ({"devices_per_node": 2, "tensor_parallel": 2, "compile": True}, "drop --compile"),
        ({"devices_per_node": 8, "tensor_parallel": 8}, "4 key/value heads do not split over 8"),  # 8 query heads do
        ({"devices_per_node": 4, "tensor_parallel": 4, "case_params": (("ffn", 350),)}, "SwiGLU's 350 units"),
        ({"devices_per_node": 2, "tensor_parallel": 2, "case_params": (("vocab", 1001),)}, "vocabulary of 1001"),
        ({"devices_per_node": 4, "tensor_parallel": 4, "input_size": 30}, "the 30 tokens"),
        ({"devices_per_node": 3, "pipeline_parallel": 3}, "4 layers do not split into 3"),
        (
            {
                "devices_per_node": 2,
                "tensor_parallel": 2,
                "case_params": (("heads", 6), ("hidden", 96), ("kv_heads", 3)),
            },
            "3 key/value heads",
        ),
    ],
)
def test_a_layout_the_family_cannot_take_is_refused_in_one_line(fields: dict[str, object], message: str) -> None:
    reason = llama_layout_refusal(_spec(**fields)) or ""
    assert message in reason and "\n" not in reason


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"devices_per_node": 2},
        {"devices_per_node": 2, "fsdp": True},
        {"devices_per_node": 4, "tensor_parallel": 4},
        {"devices_per_node": 4, "pipeline_parallel": 4},
        {"devices_per_node": 4, "tensor_parallel": 2, "fsdp": True},
        {"model": "gpt", "devices_per_node": 2, "tensor_parallel": 2},  # GPT's own refusals live in its backend
        {"framework": "jax", "devices_per_node": 2, "fsdp": True},  # JAX's (data, fsdp, tensor) mesh
        {"framework": "jax", "devices_per_node": 2, "fsdp": True, "strategy": "sharding"},
        {"framework": "jax", "devices_per_node": 4, "tensor_parallel": 2, "fsdp": True},
        {"framework": "jax", "devices_per_node": 4, "tensor_parallel": 4, "input_size": 30},  # no sequence parallel
    ],
)
def test_what_the_family_can_take_passes(fields: dict[str, object]) -> None:
    assert llama_layout_refusal(_spec(**fields)) is None


def test_the_new_fields_keep_old_keys_and_a_baseline_drops_them() -> None:
    from dlbench.analysis.scaling import baseline_spec

    plain = _spec(devices_per_node=2)
    assert "fsdp" not in plain.key() and "context_parallel" not in plain.key()
    sharded = _spec(devices_per_node=2, fsdp=True)
    assert sharded.key() != plain.key() and PointSpec.from_json(sharded.to_json()) == sharded
    assert baseline_spec(sharded).layout.fsdp is False and baseline_spec(sharded).world_size == 1
    with pytest.raises(SpecError, match="context parallel must be a whole number"):
        _spec(context_parallel=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--context-parallel", "2", "--scale", "1n2c"), CP_CUDA_ONLY),
        (("--fsdp",), "--fsdp shards over the data-parallel ranks"),
        (("-f", "jax", "--scale", "1n2c", "--pipeline-parallel", "2"), JAX_NO_PIPELINE),
        (("-f", "jax", "--scale", "1n3c", "--fsdp", "--force"), "128 hidden units over 3 ranks"),
    ],
)
def test_the_cli_refuses_before_anything_runs(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    framework = () if "-f" in args else ("-f", "torch")
    code, _, err = cli("run", *framework, "-m", "llama_tiny", "--device", "cpu", "--store", f"{tmp_path}/r.db", *args)
    assert code == 2 and message in " ".join(err.split()), err
    assert "Traceback" not in err and not (tmp_path / "r.db").exists()  # refused before a store was made
