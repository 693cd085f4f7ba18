"""Expert parallelism (#36) over CPU ranks with gloo trains the same MoE as one device: at 2 and 4 expert-parallel
ranks, 2 x 2 (expert parallel within data parallel) and plain DDP over 2 ranks (whose routing counters must not be
DDP buffers, or rank 0's would overwrite the others'), each built by the torch backend as a point builds it, give
one device's loss (the mean of the ranks' losses) on the same global batch and initial weights at every one of 3
AdamW steps (dropless), and each rank's gradients of the first step are one device's (Adam would hide a
gradient's wrong scale); the routing figures sum every rank's tokens.

Tolerance (fp32): relative 2e-5 of the loss. The exchange moves rows without arithmetic; what differs is the order
of sums (the gradients all-reduced over the ranks, the experts' rows batched differently), about 1e-7 relative
per step; a token sent to the wrong expert or a gradient missing its 1 / world moves the loss by 1e-3 or more
after the first update. The auxiliary loss is off here (weight 0): it is each rank's own (moe_parallel.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dlbench.cases import Case, get_case
from dlbench.cases.arch import Loss
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.worker import refusal  # noqa: E402
from tests.support.gloo_ranks import join_ranks, run_ranks, token_batch  # noqa: E402

PARAMS = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "expert_ffn": 32, "vocab": 128, "seq": 8}
GLOBAL_BATCH, STEPS, REL = 8, 3, 2e-5
LAYOUTS = {"ep2": (2, 2), "ep4": (4, 4), "ep2_dp2": (4, 2), "dp2": (2, 1)}  # name: (devices, expert parallel)


def _case() -> Case:
    return dataclasses.replace(get_case("moe_tiny").configured(PARAMS), loss=Loss("causal_lm", 0.0))


def _spec(devices: int, expert: int) -> PointSpec:
    return PointSpec(
        framework="torch",
        model="moe_tiny",
        batch_size=GLOBAL_BATCH // devices,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        layout=Layout(expert_parallel=expert),
        case_params=tuple(sorted(PARAMS.items())),
    )


def _global_batch() -> dict[str, Any]:
    return token_batch(PARAMS["vocab"], PARAMS["seq"], GLOBAL_BATCH)


def _losses(trainer: Any, batch: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
    """The losses of STEPS steps, and the gradients the first step's update used, by parameter name (Adam
    normalises a gradient's scale away, so the losses alone would not see a wrong 1 / world)."""
    out, grads = [], {}
    for step in range(STEPS):
        trainer.train_step(batch)
        out.append(trainer.loss())
        if step == 0:
            grads = {
                n.removeprefix("module."): p.grad.clone()  # DDP's wrapper (dp2) prefixes the names
                for n, p in trainer.model.named_parameters()
                if p.grad is not None
            }
    return out, grads


def _rank(rank: int, port: int, spec: PointSpec) -> tuple[tuple[list[float], dict[str, Any]], float, dict[str, object]]:
    ctx = join_ranks(rank, port, spec.world_size)
    backend = TorchBackend()
    assert refusal(backend, spec) is None  # the worker's whole check: the table's rules, then torch's
    trainer = backend.build(spec, _case(), ctx)
    n = spec.batch_size
    mine = {k: v[rank * n : (rank + 1) * n] for k, v in _global_batch().items()}
    losses = _losses(trainer, mine)
    checksum = trainer.param_checksum()
    facts = backend.facts()
    trainer.close()
    return losses, checksum, facts


@pytest.fixture(scope="module")
def one_device() -> tuple[list[float], dict[str, Any]]:
    """One device's losses on the global batch, from the same initial weights (the whole model)."""
    spec = PointSpec(
        framework="torch",
        model="moe_tiny",
        batch_size=GLOBAL_BATCH,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=tuple(sorted(PARAMS.items())),
    )
    return _losses(TorchBackend().build(spec, _case(), RankContext()), _global_batch())


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_expert_parallel_trains_as_one_device(name: str, one_device: tuple[list[float], dict[str, Any]]) -> None:
    spec = _spec(*LAYOUTS[name])
    results = run_ranks(_rank, spec.world_size, spec)
    # Each rank's loss is its own tokens' mean; the ranks hold equal batches, so the point's loss is their mean.
    mean = [sum(r[0][0][i] for r in results.values()) / len(results) for i in range(STEPS)]
    losses, grads = one_device
    assert mean == pytest.approx(losses, rel=REL)
    assert losses[-1] < losses[0]  # it trains
    for rank, ((_, mine), _, _) in results.items():  # each rank's gradients (its experts' and the replicated)
        assert mine.keys() <= grads.keys() and any(".experts." in n for n in mine)
        for n, g in mine.items():
            torch.testing.assert_close(g, grads[n], rtol=1e-4, atol=1e-7, msg=f"rank {rank} of {name}: {n}")
    sums = [c for _, c, _ in results.values()]
    assert max(sums) - min(sums) <= 1e-9 * abs(sums[0])  # the replicated parameters agree, as the merge checks
    facts = results[0][2]
    if spec.layout.expert_parallel > 1:
        assert f"EP{spec.layout.expert_parallel}" in str(facts["expert_parallel"])
    routing = facts["routing"]
    assert isinstance(routing, dict)
    # Summed over the ranks: every step's assignments of the global batch, per layer.
    assert [sum(row) for row in routing["tokens_per_expert"]] == [STEPS * GLOBAL_BATCH * PARAMS["seq"] * 2] * 2
    if spec.layout.expert_parallel > 1:
        assert 0 < routing["all_to_all_share"] < 1


def _nccl_like_rank(rank: int, port: int, spec: PointSpec) -> tuple[dict[str, int], dict[str, object], list[str]]:
    """One EP rank under NCCL's rule for collectives (a tensor copied to the host is refused: "no backend for
    device type cpu"), its step's host reads counted after a warm-up step, then its facts read as the worker reads
    them after timing."""
    import torch.distributed as dist

    from dlbench.backends.torch.step import make_optimizer
    from tests.support.host_reads import counted_host_reads

    real_cpu, real_all_reduce = torch.Tensor.cpu, dist.all_reduce
    groups: list[str] = []

    def to_host(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_cpu(self, *args, **kwargs).clone()
        out.on_host = True  # what NCCL would see: a tensor on the host, not the device
        return out

    def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(tensor, "on_host", False):
            raise RuntimeError("No backend type associated with device type cpu")
        groups.append(repr(kwargs.get("group")))
        return real_all_reduce(tensor, *args, **kwargs)

    torch.Tensor.cpu, dist.all_reduce = to_host, all_reduce  # type: ignore[method-assign]
    try:
        ctx = join_ranks(rank, port, spec.world_size)
        backend = TorchBackend()
        trainer = backend.build(spec, _case(), ctx)
        trainer.optimizer = make_optimizer(_case(), trainer.model, GLOBAL_BATCH, fused=True)  # as on a GPU
        n = spec.batch_size
        mine = {k: v[rank * n : (rank + 1) * n] for k, v in _global_batch().items()}
        trainer.train_step(mine)  # warm-up
        with counted_host_reads() as reads:
            for _ in range(2):
                trainer.train_step(mine)
        groups.clear()
        facts = backend.facts()
        trainer.close()
        return dict(reads), facts, groups
    finally:
        torch.Tensor.cpu, dist.all_reduce = real_cpu, real_all_reduce  # type: ignore[method-assign]


def test_ep2_counters_reduce_on_the_device_and_host_reads_are_recorded() -> None:
    """#40 on two gloo ranks with NCCL's rule (a host tensor refused by the collective): the routing counters
    are all-reduced where they are, over the point's (default) group, after timing, and read once; each rank's
    step reads the host exactly as often as its recorded host_sync_per_step (one read per MoE layer: the
    all-to-all's split sizes), where it made three per layer before."""
    spec = _spec(2, 2)
    results = run_ranks(_nccl_like_rank, spec.world_size, spec)
    for reads, facts, groups in results.values():
        recorded = facts["host_sync_per_step"]
        assert isinstance(recorded, dict) and recorded["count"] == PARAMS["layers"]
        assert reads == {"item": 0, "tolist": 2 * PARAMS["layers"], "cpu": 0}
        assert groups == ["None"]  # one all-reduce of the counters, over the default group: every rank
        routing = facts["routing"]
        assert isinstance(routing, dict)
        assert [sum(row) for row in routing["tokens_per_expert"]] == [3 * GLOBAL_BATCH * PARAMS["seq"] * 2] * 2
