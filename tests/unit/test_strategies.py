"""Gradient strategies (#22) without a framework: which points run one process, --bucket-mb in the spec and its
key, the controller's check of one process's replicas, the baseline of a bucketed point, torch's refusals."""

from __future__ import annotations

import dataclasses

import pytest

from dlbench.launch.merge import merge
from dlbench.results.scaling import baseline_spec
from dlbench.spec import PointSpec, Protocol, SpecError
from dlbench.wire import WorkerResult

PROTO = Protocol(0, 1, 1, "median")


def _spec(framework: str = "tf", strategy: str = "replicated-copy", k: int = 2, **kw: object) -> PointSpec:
    return PointSpec(framework=framework, model="resnet50", batch_size=2, protocol=PROTO, devices_per_node=k,
                     strategy=strategy, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("framework", "strategy", "processes"), [
    ("tf", "ps-cpu", 1), ("tf", "replicated-pscpu", 1), ("tf", "independent", 1), ("mxnet", "ps-gpu", 1),
    ("torch", "dp", 1), ("torch", "replicated-pscpu", 4), ("paddle", "ps-cpu", 4), ("torch", "ddp-fp16", 4),
    ("tf", "multiworker", 4)])
def test_one_process_drives_every_device_only_where_the_framework_does(framework: str, strategy: str,
                                                                        processes: int) -> None:
    assert _spec(framework, strategy, k=4).processes == processes


def test_bucket_mb_belongs_to_bucketed_strategies_and_to_the_key_only_when_set() -> None:
    plain = _spec("torch", "ddp")
    assert plain.key() == PointSpec.from_json(plain.to_json()).key() and "bucket_mb" not in plain.key()
    bucketed = dataclasses.replace(plain, bucket_mb=100)
    assert '"bucket_mb": 100' in bucketed.key() and bucketed.key() != plain.key()
    assert PointSpec.from_json(bucketed.to_json()) == bucketed
    with pytest.raises(SpecError, match="has no buckets"):
        dataclasses.replace(plain, strategy="allreduce", bucket_mb=5)
    with pytest.raises(SpecError, match="bucket size"):
        dataclasses.replace(plain, bucket_mb=0)
    base = baseline_spec(bucketed)  # the 1-device point a bucketed point is measured against has no strategy
    assert base.strategy == "none" and base.bucket_mb is None and base.world_size == 1


def _merged(spec: PointSpec, sums: object) -> tuple[str, str | None, dict[str, object]]:
    facts = {} if sums is None else {"replica_checksums": sums}
    out = merge(spec, {0: WorkerResult(status="ok", facts=facts)}, {})
    return out.status, out.error, dict(out.result.facts) if out.result else {}


def test_one_process_replicas_are_checked_as_ranks_are() -> None:
    status, _, facts = _merged(_spec(), [1.5, 1.5])
    assert status == "ok" and facts["replica_check"] == "2 copies equal after the measured steps"
    status, error, _ = _merged(_spec(), [1.5, 1.6])
    assert status == "failed_check" and "differ across replicas" in str(error)
    status, error, _ = _merged(_spec(), None)
    assert status == "failed_check" and "no replica checksums" in str(error)
    status, _, facts = _merged(_spec(strategy="ps-cpu"), [1.5])
    assert status == "ok" and str(facts["replica_check"]).startswith("one copy")


def test_independent_replicas_are_expected_to_differ_and_recorded_so() -> None:
    status, _, facts = _merged(_spec(strategy="independent"), [1.5, 1.6])
    assert status == "ok" and "differ, as expected" in str(facts["replica_check"])


def test_one_device_points_are_not_replica_checked() -> None:
    out = merge(_spec(strategy="none", k=1), {0: WorkerResult(status="ok")}, {})
    assert out.status == "ok" and "replica_check" not in (out.result.facts if out.result else {})


def test_torch_refuses_dp_on_the_cpu_and_horovod_where_it_is_absent() -> None:
    distributed = pytest.importorskip("dlbench.backends.torch.distributed", reason="torch is not installed here")
    assert "on the CPU it cannot run several devices" in str(distributed.refuse(_spec("torch", "dp", device="cpu")))
    assert distributed.refuse(_spec("torch", "dp", device="cuda")) is None  # the GPU is DataParallel's ground
    assert "one node" in str(distributed.refuse(_spec("torch", "dp", device="cuda", nodes=2)))
    assert distributed.refuse(_spec("torch", "powersgd")) is None
    import importlib.util
    if importlib.util.find_spec("horovod") is None:
        assert "0.28.1" in str(distributed.refuse(_spec("torch", "horovod")))
