"""GPT split over CPU ranks with gloo trains the same model as one device (#23): tensor parallel, a pipeline
(GPipe), data x tensor (2D) and tensor x pipeline (1F1B), each built by the torch backend as a point builds it,
give one device's loss on the same global batch and initial weights at every one of 3 AdamW steps.

Tolerance (fp32): relative 2e-5 of the loss. A split sums the same products in another order (the row-split
all-reduce, the vocabulary-parallel softmax, the micro-batches' averaged gradients), which moves the loss by
about 1e-7 relative per step; a wrong split (a head cut in two, a missed all-reduce, an unsynced tied
embedding) moves it by 1e-3 or more at the first step after the update.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dlbench.cases import get_case
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext
from tests.support.gloo_ranks import join_ranks, run_ranks, step_losses, token_batch

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402 - only once torch is there

PARAMS = {"heads": 4, "hidden": 64, "layers": 2, "seq": 32, "vocab": 1000}
GLOBAL_BATCH, STEPS, REL = 8, 3, 2e-5
LAYOUTS = {  # name: (devices, tensor, pipeline, micro-batches, schedule)
    "tensor": (2, 2, 1, 1, "1f1b"),
    "pipeline": (2, 1, 2, 4, "gpipe"),
    "2d": (4, 2, 1, 1, "1f1b"),
    "tensor+pipeline": (4, 2, 2, 4, "1f1b"),
}


def _case() -> Any:
    """The tiny GPT without dropout (each rank would draw its own masks)."""
    case = get_case("gpt").configured(PARAMS)
    return dataclasses.replace(case, arch=dataclasses.replace(case.arch, dropout=0.0))


def _spec(devices: int, tensor: int, pipeline: int, micro: int, schedule: str) -> PointSpec:
    data = devices // (tensor * pipeline)
    return PointSpec(
        framework="torch",
        model="gpt",
        batch_size=GLOBAL_BATCH // data,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        layout=Layout(tensor_parallel=tensor, pipeline_parallel=pipeline, micro_batches=micro, schedule=schedule),
        case_params=tuple(sorted(PARAMS.items())),
    )


def _global_batch() -> dict[str, Any]:
    return token_batch(PARAMS["vocab"], PARAMS["seq"], GLOBAL_BATCH)


def _losses(trainer: Any, batch: dict[str, Any]) -> list[float]:
    return step_losses(trainer, batch, STEPS)


def _rank(rank: int, port: int, spec: PointSpec) -> tuple[list[float], float, dict[str, object]]:
    ctx = join_ranks(rank, port, spec.world_size)
    backend = TorchBackend()
    trainer = backend.build(spec, _case(), ctx)
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
    spec = dataclasses.replace(_spec(1, 1, 1, 1, "1f1b"), batch_size=GLOBAL_BATCH)
    return _losses(TorchBackend().build(spec, _case(), RankContext()), _global_batch())


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_split_gpt_trains_as_one_device(name: str, one_device: list[float]) -> None:
    spec = _spec(*LAYOUTS[name])
    results = run_ranks(_rank, spec.world_size, spec)
    for rank, (losses, _, _) in results.items():
        assert losses == pytest.approx(one_device, rel=REL), f"rank {rank} of {spec.layout.label}"
    assert one_device[-1] < one_device[0]  # it trains
    sums = [c for _, c, _ in results.values()]
    assert max(sums) - min(sums) <= 1e-9 * abs(sums[0])  # the replicas' parameters agree, as the merge checks
    facts = results[0][2]
    assert facts["layout"] == spec.layout.label
    if spec.layout.pipeline_parallel > 1:
        stage_ms = facts["pipeline"]["stage_forward_ms"] + facts["pipeline"]["stage_backward_ms"]
        assert len(stage_ms) == 2 * spec.layout.pipeline_parallel and all(t > 0 for t in stage_ms)
        assert facts["pipeline"]["bubble"] == pytest.approx(1 / 5)  # (P - 1) / (M + P - 1), P 2, M 4
