"""The Llama layouts (#35) over CPU ranks with gloo train the same model as one device: FSDP2 (`--fsdp`), tensor
parallel with sequence parallel, a pipeline, and their compositions on one (pp, dp, tp) mesh, at 2 and 4 ranks,
each built by the torch backend as a point builds it, give one device's loss on the same global batch and initial
weights at every one of 3 AdamW steps.

Tolerance (fp32): relative 2e-5 of the loss. A layout sums the same products in another order (reduce-scatters of
FSDP's gradients and of the row-split outputs, the vocabulary-parallel softmax, the micro-batches' averaged
gradients), which moves the loss by about 1e-7 relative per step; a wrong split (a key/value head group cut, a
sequence shard rotated at the wrong positions, an unsynced tied embedding) moves it by 1e-3 or more at the first
step after the update.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dlbench.cases import get_case
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.worker import refusal  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks, step_losses, token_batch  # noqa: E402

# Tiny, so that 4 ranks on 2 shared cores stay quick; tied, so that a pipeline keeps its two copies in step.
PARAMS = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128, "seq": 8, "tied": 1}
GLOBAL_BATCH, STEPS, REL = 8, 3, 2e-5
LAYOUTS = {  # name: (devices, tensor, pipeline, micro-batches, schedule, fsdp)
    "fsdp2": (2, 1, 1, 1, "1f1b", True),
    "tp_sp2": (2, 2, 1, 1, "1f1b", False),
    "pp2": (2, 1, 2, 4, "gpipe", False),
    "fsdp4": (4, 1, 1, 1, "1f1b", True),
    "fsdp2_tp_sp2": (4, 2, 1, 1, "1f1b", True),
    "tp_sp2_pp2": (4, 2, 2, 2, "1f1b", False),
}


def _spec(devices: int, tensor: int, pipeline: int, micro: int, schedule: str, fsdp: bool) -> PointSpec:
    data = devices // (tensor * pipeline)
    return PointSpec(
        framework="torch",
        model="llama_tiny",
        batch_size=GLOBAL_BATCH // data,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        layout=Layout(
            tensor_parallel=tensor, pipeline_parallel=pipeline, micro_batches=micro, schedule=schedule, fsdp=fsdp
        ),
        case_params=tuple(sorted(PARAMS.items())),
    )


def _global_batch() -> dict[str, Any]:
    return token_batch(PARAMS["vocab"], PARAMS["seq"], GLOBAL_BATCH)


def _losses(trainer: Any, batch: dict[str, Any]) -> list[float]:
    return step_losses(trainer, batch, STEPS)


def _rank(rank: int, port: int, spec: PointSpec) -> tuple[list[float], float, dict[str, object]]:
    ctx = join_ranks(rank, port, spec.world_size)
    backend = TorchBackend()
    assert refusal(backend, spec) is None  # the worker's whole check: the table's rules, then torch's
    trainer = backend.build(spec, get_case("llama_tiny").configured(PARAMS), ctx)
    dp = trainer.mesh["dp"].get_local_rank()  # type: ignore[attr-defined]
    n = spec.batch_size
    mine = {k: v[dp * n : (dp + 1) * n] for k, v in _global_batch().items()}
    losses = _losses(trainer, mine)
    checksum = trainer.param_checksum()
    trainer.close()
    return losses, checksum, backend.facts()


@pytest.fixture(scope="module")
def one_device() -> list[float]:
    """One device's losses on the global batch, from the same seed (the whole model)."""
    torch.manual_seed(0)
    spec = PointSpec(
        framework="torch",
        model="llama_tiny",
        batch_size=GLOBAL_BATCH,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=tuple(sorted(PARAMS.items())),
    )
    return _losses(
        TorchBackend().build(spec, get_case("llama_tiny").configured(PARAMS), RankContext()), _global_batch()
    )


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_llama_layout_trains_as_one_device(name: str, one_device: list[float]) -> None:
    spec = _spec(*LAYOUTS[name])
    results = run_ranks(_rank, spec.world_size, spec)
    for rank, (losses, _, _) in results.items():
        assert losses == pytest.approx(one_device, rel=REL), f"rank {rank} of {name}"
    assert one_device[-1] < one_device[0]  # it trains
    sums = [c for _, c, _ in results.values()]
    assert max(sums) - min(sums) <= 1e-9 * abs(sums[0])  # the replicas' parameters agree, as the merge checks
    facts = results[0][2]
    assert facts["parallel"]["fsdp"] == spec.layout.fsdp  # type: ignore[index]
    if spec.layout.fsdp:
        assert "per block" in str(facts["data_parallel"])
    if spec.layout.tensor_parallel > 1:
        assert "sequence-parallel" in str(facts["tensor_parallel"])
    assert "half" in facts["llm_flops_per_sample"]["convention"]  # type: ignore[index]


def _bf16_rank(rank: int, port: int, spec: PointSpec) -> tuple[list[float], list[str], list[tuple[str, str]], object]:
    """An FSDP2 rank in bf16: its losses, the dtype its first linear layer's weight has when used, and the
    MixedPrecisionPolicy each FSDP unit runs under (torch's own record of it)."""
    from torch.distributed.fsdp import FSDPModule

    ctx = join_ranks(rank, port, spec.world_size)
    backend = TorchBackend()
    trainer = backend.build(spec, get_case("llama_tiny").configured(PARAMS), ctx)
    used: list[str] = []
    wq = trainer.model.get_submodule("blocks.0.attention.wq")  # type: ignore[attr-defined]
    wq.register_forward_pre_hook(lambda m, _: used.append(str(m.weight.dtype)))
    n = spec.batch_size
    losses = _losses(trainer, {k: v[rank * n : (rank + 1) * n] for k, v in _global_batch().items()})
    policies = [
        (str(p.param_dtype), str(p.reduce_dtype))
        for m in trainer.model.modules()  # type: ignore[attr-defined]
        if isinstance(m, FSDPModule) and (p := m._get_fsdp_state()._fsdp_param_group.mp_policy)  # type: ignore[attr-defined]
    ]
    trainer.close()
    return losses, used, policies, backend.facts()["fsdp_mixed_precision"]


def test_fsdp2_in_bf16_runs_under_an_explicit_recorded_policy() -> None:
    """#40: an FSDP2 point in bf16 shards under MixedPrecisionPolicy(bf16 parameters, fp32 reduction), as the
    anchors (torchtitan) do, where it all-gathered and reduced fp32 before; every unit has the policy, the layers
    compute with bf16 weights, the point records it, and it trains as one bf16 device (within bf16's rounding)."""
    spec = dataclasses.replace(_spec(*LAYOUTS["fsdp2"]), precision="bf16")
    one = dataclasses.replace(spec, batch_size=GLOBAL_BATCH, devices_per_node=1, layout=Layout())
    torch.manual_seed(0)
    reference = _losses(
        TorchBackend().build(one, get_case("llama_tiny").configured(PARAMS), RankContext()), _global_batch()
    )
    results = run_ranks(_bf16_rank, spec.world_size, spec)
    for losses, used, policies, fact in results.values():
        assert policies and set(policies) == {("torch.bfloat16", "torch.float32")}
        assert set(used) == {"torch.bfloat16"}
        assert "param_dtype=bfloat16, reduce_dtype=float32" in str(fact)
        assert losses[-1] < losses[0] and losses == pytest.approx(reference, rel=2e-2)
