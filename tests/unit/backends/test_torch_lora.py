"""LoRA in torch (#47): the adapters have the case's exact trainable count and the base its frozen one (llama2_70b
on the meta device); an adapted model starts at the base model's output (B is zero) and a step moves only the
adapters; the point records its counts; and FSDP2 over the frozen base at 2 gloo ranks gives one device's loss on
the same global batch at every one of 3 AdamW steps (relative 2e-5, as the Llama layouts; dropout 0)."""

from __future__ import annotations

from typing import Any

import pytest

from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.llama import LlamaModel  # noqa: E402
from dlbench.backends.torch.lora import frozen_count  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks, step_losses, token_batch  # noqa: E402
from tests.support.specs import flat_spec  # noqa: E402

SHAPE = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128, "seq": 8, "lora": 4}
PARAMS = {**SHAPE, "lora_dropout": 0}
GLOBAL_BATCH, STEPS, REL = 8, 3, 2e-5


def test_llama2_70b_adapters_and_frozen_base_have_their_counts() -> None:
    case = get_case("llama2_70b").configured({"lora": 16})
    with torch.device("meta"):
        model = build_model(case)
    assert count_trainable(model) == case.param_count == 44_564_480
    assert frozen_count(model) == get_case("llama2_70b").param_count


def test_an_adapted_model_starts_at_its_base_and_trains_only_adapters() -> None:
    case = get_case("llama_tiny").configured(PARAMS)
    torch.manual_seed(0)
    base = LlamaModel(get_case("llama_tiny").configured(SHAPE | {"lora": 0}).arch)  # type: ignore[arg-type]
    torch.manual_seed(0)
    spec = _spec(1, GLOBAL_BATCH, fsdp=False)
    backend = TorchBackend()
    trainer = backend.build(spec, case, RankContext())
    batch = token_batch(128, 8, GLOBAL_BATCH)
    with torch.no_grad():
        assert torch.allclose(trainer.model(batch["input_ids"]), base(batch["input_ids"]), atol=1e-6)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    step_losses(trainer, batch, 2)
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(".adapter." in n or "qkv_adapter" in n for n in moved)
    assert {n for n, p in trainer.model.named_parameters() if p.requires_grad} >= moved
    lora = backend.facts()["lora"]
    assert lora["params_trainable"] == case.param_count and lora["params_frozen"] == frozen_count(trainer.model)  # type: ignore[index]


def _spec(devices: int, batch: int, fsdp: bool) -> PointSpec:
    return flat_spec(
        framework="torch",
        model="llama_tiny",
        batch_size=batch,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        fsdp=fsdp,
        case_params=tuple(sorted(PARAMS.items())),
    )


def _rank(rank: int, port: int) -> tuple[list[float], object]:
    ctx = join_ranks(rank, port, 2)
    spec = _spec(2, GLOBAL_BATCH // 2, fsdp=True)
    backend = TorchBackend()
    assert backend.refuse(spec) is None
    trainer = backend.build(spec, get_case("llama_tiny").configured(PARAMS), ctx)
    n = spec.batch_size
    mine: dict[str, Any] = {k: v[rank * n : (rank + 1) * n] for k, v in token_batch(128, 8, GLOBAL_BATCH).items()}
    losses = step_losses(trainer, mine, STEPS)
    trainer.close()
    return losses, backend.facts()["data_parallel"]


def test_fsdp_over_the_frozen_base_gives_one_devices_loss() -> None:
    torch.manual_seed(0)
    one = TorchBackend().build(_spec(1, GLOBAL_BATCH, False), get_case("llama_tiny").configured(PARAMS), RankContext())
    expected = step_losses(one, token_batch(128, 8, GLOBAL_BATCH), STEPS)
    assert expected[-1] < expected[0]
    out = run_ranks(_rank, 2)
    for step in range(STEPS):
        assert out[0][0][step] == pytest.approx(expected[step], rel=REL)  # FSDP: the loss of the global batch
    assert "FSDP2" in str(out[0][1])
