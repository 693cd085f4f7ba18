"""Gradient strategies (#22) against one device on the same global batch: TF's variable managers on logical CPU
devices, torch's DDP hooks and strategies on 2 gloo ranks, MXNet's kvstores over 2 CPU contexts.

Each framework runs one probe process (strategy_probe_*.py) over every strategy it has, on a tiny VGG without
batch norm or dropout, so that N replicas on N slices of a batch compute exactly one device's gradient. The
stated tolerances, as a fraction of how far the steps moved one device's loss:

- exact exchanges (sums of fp32 gradients, in another order at most): 1e-4;
- fp16 compression (ddp-fp16, an 11-bit mantissa): 1e-3; bf16 compression (8 bits): 1e-2;
- PowerSGD at rank 1 (an approximation of each gradient matrix, from the third step): 5e-2.

No exchange at all (independent) misses one device's loss by far more (about half of the move here): the
tolerances catch a strategy that silently stopped exchanging.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.frameworks import interpreter_or_skip

HERE = Path(__file__).parent
STEPS = 4
EXACT, FP16, BF16, POWERSGD = 1e-4, 1e-3, 1e-2, 5e-2
TORCH_TOLERANCE = {
    "ddp": EXACT,
    "replicated-pscpu": EXACT,
    "allreduce": EXACT,
    "ps": EXACT,
    "ddp-fp16": FP16,
    "ddp-bf16": BF16,
    "powersgd": POWERSGD,
}


def _probe(python: str, name: str, *args: str, timeout: float = 600) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [python, str(HERE / name), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:  # say where it stopped: the probes report each step on stderr
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{name} still running after {timeout:.0f} s; its stderr ends:\n{err[-3000:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_matches(one: list[float], losses: list[float], tolerance: float, label: str) -> None:
    """Every step's loss within tolerance x (how far one device's loss moved over the steps)."""
    move = abs(one[0] - one[-1])
    assert move > 0.01 * abs(one[0]), (label, one)  # the steps moved the loss, so a wrong exchange shows
    worst = max(abs(a - b) for a, b in zip(one, losses))
    assert worst <= tolerance * move, (
        f"{label}: off by {worst:.3g}, tolerance {tolerance} x {move:.3g}: {losses} vs {one}"
    )


def _equal(sums: list[float]) -> bool:
    return all(math.isclose(s, sums[0], rel_tol=1e-9) for s in sums)


# ---------------------------------------------------------------------------------------------------- TF


@pytest.fixture(scope="module")
def tf_probe() -> dict[str, object]:
    """TF's six strategies (five on the CPU) on 2 logical CPU devices, one device, and mirrored, in one process."""
    return _probe(interpreter_or_skip("tf"), "strategy_probe_tf.py", "2", str(STEPS))


@pytest.mark.framework("tf")
@pytest.mark.parametrize("strategy", ["ps-cpu", "ps-gpu", "replicated-copy", "replicated-pscpu"])
def test_tf_synchronous_strategies_match_one_device(tf_probe: dict[str, object], strategy: str) -> None:
    got = tf_probe[strategy]
    assert isinstance(got, dict)
    _assert_matches(tf_probe["one_device"], got["losses"], EXACT, strategy)  # type: ignore[arg-type]
    assert _equal(got["checksums"]) and len(got["checksums"]) == (1 if strategy.startswith("ps") else 2)


@pytest.mark.framework("tf")
def test_tf_places_parameters_and_sums_where_each_strategy_says(tf_probe: dict[str, object]) -> None:
    """Read back from the variables and from the traced step's AddN ops: /CPU:2 is the host beside 2 devices."""
    ps_cpu, ps_gpu, copy, pscpu = (tf_probe[s] for s in ("ps-cpu", "ps-gpu", "replicated-copy", "replicated-pscpu"))
    assert list(ps_cpu["variables_on"]) == ["CPU:2"] and list(ps_cpu["sums_on"]) == ["CPU:2"]  # type: ignore[index]
    assert set(ps_gpu["variables_on"]) == {"CPU:0", "CPU:1"}  # type: ignore[index]  # spread by size
    assert ps_gpu["sums_on"] == ps_gpu["variables_on"]  # type: ignore[index]  # each sum on its variable's device
    assert set(copy["sums_on"]) == {"CPU:0", "CPU:1"}  # type: ignore[index]  # gradient i on device i mod 2
    assert list(pscpu["sums_on"]) == ["CPU:2"]  # type: ignore[index]


@pytest.mark.framework("tf")
def test_tf_independent_replicas_differ_and_nccl_is_refused_on_the_cpu(tf_probe: dict[str, object]) -> None:
    alone = tf_probe["independent"]
    assert isinstance(alone, dict) and not _equal(alone["checksums"]) and not alone["sums_on"]
    one = tf_probe["one_device"]
    assert alone["losses"][0] == pytest.approx(one[0]) and alone["losses"][-1] != pytest.approx(one[-1])  # type: ignore[index]
    assert "GPUs only" in str(tf_probe["nccl_refusal"]) and "ReductionToOneDevice" in str(tf_probe["nccl_refusal"])
    mirrored = tf_probe["mirrored"]  # the existing one-process strategy keeps its replicas' checksums too
    assert isinstance(mirrored, dict) and len(mirrored["checksums"]) == 2 and _equal(mirrored["checksums"])
    assert mirrored["communication"]  # the cross-device op TF chose, read back


# ------------------------------------------------------------------------------------------------- torch


def test_torch_strategies_match_one_device_on_two_ranks() -> None:
    """DDP, its hooks and the hand-made exchanges on 2 gloo ranks: every rank's parameters equal, the global
    loss within each strategy's tolerance of one device's."""
    answer = _probe(sys.executable, "strategy_probe_torch.py", str(STEPS), *TORCH_TOLERANCE, timeout=240)
    for strategy, tolerance in TORCH_TOLERANCE.items():
        got = answer[strategy]
        assert isinstance(got, dict)
        assert _equal(got["checksums"]), (strategy, got["checksums"])
        _assert_matches(answer["one_device"], got["losses"], tolerance, strategy)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------- MXNet


@pytest.fixture(scope="module")
def mxnet_probe() -> dict[str, object]:
    """MXNet's kvstores over 2 CPU contexts and one context, in one process."""
    return _probe(interpreter_or_skip("mxnet"), "strategy_probe_mxnet.py", "2", str(STEPS))


@pytest.mark.framework("mxnet")
def test_mxnet_kvstores_match_one_context_and_independent_differs(mxnet_probe: dict[str, object]) -> None:
    answer = mxnet_probe
    for strategy, kvstore in (("ps-cpu", "local"), ("ps-gpu", "device")):
        got = answer[strategy]
        assert isinstance(got, dict) and got["kvstore"] == kvstore and got["update_on_kvstore"] is True
        assert _equal(got["checksums"])
        _assert_matches(answer["one_device"], got["losses"], EXACT, strategy)  # type: ignore[arg-type]
    alone = answer["independent"]
    assert isinstance(alone, dict) and alone["kvstore"].startswith("none") and not _equal(alone["checksums"])
    assert "GPUs (NCCL)" in str(answer["nccl_refusal"])


@pytest.mark.framework("mxnet")
def test_mxnet_dist_sync_across_processes_matches_one_context(mxnet_probe: dict[str, object]) -> None:
    """ps: MXNet's dist_sync kvstore with its scheduler, one server and 2 workers as processes of their own."""
    one = mxnet_probe["one_device"]
    got = _probe(interpreter_or_skip("mxnet"), "strategy_probe_mxnet.py", "dist", "2", str(STEPS))
    assert got["kvstore"] == "dist_sync" and _equal(got["checksums"])  # type: ignore[arg-type]
    _assert_matches(one, got["losses"], EXACT, "ps (dist_sync)")  # type: ignore[arg-type]


@pytest.mark.framework("tf")
def test_tf_ps_trains_asynchronously_through_its_servers(cli: object, store_path: Path) -> None:
    """ParameterServerStrategy: the coordinator measures, 2 worker servers and a ps task beside it, then gone."""
    interpreter_or_skip("tf")
    code, _, err = cli(
        "run",
        "-f",
        "tf",
        "-m",
        "resnet50",
        "--input-size",
        "32",
        "-b",
        "1",
        "--scale",
        "1n2c",  # type: ignore[operator]
        "--strategy",
        "ps",
        "--device",
        "cpu",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    from dlbench.store.store import Store

    [point] = [p.result for p in Store(store_path).points() if p.result.spec.strategy == "ps"]
    assert point.status == "ok" and point.metrics is not None, point.error
    assert str(point.extra["synchronization"]).startswith("asynchronous") and point.extra["workers"] == 2
    assert str(point.extra["replica_check"]).startswith("one copy")
