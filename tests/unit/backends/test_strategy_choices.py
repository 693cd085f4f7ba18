"""Gradient strategies (#22) without a framework: which points run one process, --bucket-mb in the spec and its
key, the controller's check of one process's replicas, the baseline of a bucketed point (the strategies' refusals:
test_refusal_rules.py)."""

from __future__ import annotations

import pytest

from dlbench.analysis.scaling import baseline_spec
from dlbench.launch.merge import merge
from dlbench.spec import PointSpec, Protocol, SpecError
from dlbench.wire import WorkerResult
from tests.support.specs import flat_replace, flat_spec

PROTO = Protocol(0, 1, 1, "median")


def _spec(framework: str = "tf", strategy: str = "replicated-copy", k: int = 2, **kw: object) -> PointSpec:
    return flat_spec(
        framework=framework, model="resnet50", batch_size=2, protocol=PROTO, devices_per_node=k, strategy=strategy, **kw
    )


@pytest.mark.parametrize(
    ("framework", "strategy", "processes"),
    [
        ("tf", "ps-cpu", 1),
        ("tf", "replicated-pscpu", 1),
        ("tf", "independent", 1),
        ("mxnet", "ps-gpu", 1),
        ("torch", "dp", 1),
        ("torch", "replicated-pscpu", 4),
        ("mxnet", "ps", 4),
        ("torch", "ddp-fp16", 4),
        ("tf", "multiworker", 4),
    ],
)
def test_one_process_drives_every_device_only_where_the_framework_does(
    framework: str, strategy: str, processes: int
) -> None:
    assert _spec(framework, strategy, k=4).processes == processes


def test_bucket_mb_belongs_to_bucketed_strategies_and_to_the_key_only_when_set() -> None:
    plain = _spec("torch", "ddp")
    assert plain.key() == PointSpec.from_json(plain.to_json()).key() and "bucket_mb" not in plain.key()
    bucketed = flat_replace(plain, bucket_mb=100)
    assert '"bucket_mb": 100' in bucketed.key() and bucketed.key() != plain.key()
    assert PointSpec.from_json(bucketed.to_json()) == bucketed
    with pytest.raises(SpecError, match="has no buckets"):
        flat_replace(plain, strategy="allreduce", bucket_mb=5)
    with pytest.raises(SpecError, match="bucket size"):
        flat_replace(plain, bucket_mb=0)
    base = baseline_spec(bucketed)  # the 1-device point a bucketed point is measured against has no strategy
    assert base.strategy == "none" and base.layout.bucket_mb is None and base.world_size == 1


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


def test_the_strategy_suites_expand_to_the_seeds_matrices() -> None:
    from dlbench.suite import load
    from dlbench.suite.expand import expand

    gpu = expand(load("alibaba-strategies"), "cuda")
    assert {p.spec.model for p in gpu} == {"inception_v3", "resnet50", "resnet152", "alexnet", "vgg16"}
    assert len(gpu) == 5 * (1 + 5 * 3)  # five strategies at 2, 4 and 8 GPUs, one shared 1-GPU point per model
    assert {p.spec.strategy for p in gpu if p.spec.world_size > 1} == {
        "ps-cpu",
        "ps-gpu",
        "replicated-nccl",
        "replicated-copy",
        "replicated-pscpu",
    }
    assert all(p.spec.processes == 1 for p in gpu)  # one process drives the server's GPUs, as tf_cnn did
    cpu = expand(load("alibaba-strategies-cpu"), "cpu")
    assert len(cpu) == 5 * (1 + 4 * 2) and {p.spec.world_size for p in cpu} == {1, 2, 4}
    assert "replicated-nccl" not in {p.spec.strategy for p in cpu}  # refused on the CPU: left out, said so
    sizes = {p.spec.model: p.spec.input_size for p in cpu}
    assert sizes["inception_v3"] == 80 and sizes["resnet50"] == 64  # per model: Inception's stem needs 75
    tf_cnn = expand(load("tf-cnn-strategies-cpu"), "cpu")
    assert {"independent", "multiworker"} <= {p.spec.strategy for p in tf_cnn}


def test_a_per_model_input_size_names_known_models_and_whole_numbers() -> None:
    from dlbench.suite.schema import SuiteError, parse_suite

    base = "name: s\naxes: {framework: fake, model: [resnet50, alexnet]}\n"
    suite = parse_suite(base + "input_size: {resnet50: 32}\n", "s.yaml")
    assert suite.input_size == {"resnet50": 32}
    with pytest.raises(SuiteError, match="resnet51"):
        parse_suite(base + "input_size: {resnet51: 32}\n", "s.yaml")
    with pytest.raises(SuiteError, match="whole number"):
        parse_suite(base + "input_size: {resnet50: 0}\n", "s.yaml")


def test_mxnet_ps_starts_its_scheduler_and_server_beside_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.launch import hosts
    from dlbench.launch.outcome import GroupOutcome
    from dlbench.wire import SERVER_VAR

    spec = _spec("mxnet", "ps", k=2)
    assert spec.servers == 2 and spec.processes == 2
    assert _spec("torch", "ps").servers == 0 and _spec("tf", "ps-cpu").servers == 0
    seen: list[dict[str, str]] = []

    def fake_group(commands: list[list[str]], spec: PointSpec, envs: list[dict[str, str]], *_: object) -> GroupOutcome:
        seen.extend(envs)
        return GroupOutcome([0] * len(commands))

    monkeypatch.setattr(hosts, "run_group", fake_group)
    hosts.local(spec, "python", None)
    assert [e.get("RANK") for e in seen] == ["0", "1", None, None]  # two ranks, then the two servers
    assert [e.get(SERVER_VAR) for e in seen] == [None, None, "0", "1"]


def test_tf_ps_is_one_coordinator_and_a_server_per_device_and_a_ps_task(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.launch import hosts
    from dlbench.launch.outcome import GroupOutcome
    from dlbench.wire import SERVER_VAR, configure_rank

    spec = _spec("tf", "ps", k=2)
    assert (spec.processes, spec.servers) == (1, 3)
    seen: list[dict[str, str]] = []

    def fake_group(commands: list[list[str]], spec: PointSpec, envs: list[dict[str, str]], *_: object) -> GroupOutcome:
        seen.extend(envs)
        return GroupOutcome([0] * len(commands))

    monkeypatch.setattr(hosts, "run_group", fake_group)
    hosts.local(spec, "python", None)  # not the single-worker path: its servers start beside it
    assert [e.get(SERVER_VAR) for e in seen] == [None, "0", "1", "2"] and seen[0]["RANK"] == "0"
    ctx = configure_rank(spec, dict(seen[1]))  # a server reads the rendezvous port to find the others
    assert ctx.server == 0 and ctx.master_port == int(seen[1]["MASTER_PORT"])
