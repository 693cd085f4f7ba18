"""The max batch cache is keyed on the device its probes ran on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store
from dlbench.wire import RankContext, WorkerResult

H100 = "NVIDIA H100 80GB HBM3"


def test_max_batch_cache_keyed_on_the_probes_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The max-batch cache keys each probe on the device its worker reported (NVML's name of the rank's GPU,
    `rank_gpu`), not the controller's: a search placed by Slurm from a GPU-less login node on an H100 does not
    reuse the probes an earlier search ran on an A100; the same search again reuses its own (all but the first
    probe, whose worker says where the search runs)."""
    from dlbench.analysis.record import point_result
    from dlbench.backends.fake import FakeBackend
    from dlbench.launch.registry import Launchers
    from dlbench.runapi import maxbatch
    from dlbench.spec import PointSpec
    from dlbench.wire import RANK_GPU
    from dlbench.worker.measure import environment
    from tests.support.nvml_machine import FakeGpu, install

    a100 = "NVIDIA A100-SXM4-80GB"
    install(monkeypatch, [FakeGpu(a100, "GPU-aaaa-0000"), FakeGpu(H100, "GPU-bbbb-1111")])  # pynvml's answers
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    base = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=1,
        protocol=Protocol(1, 1, 1, "median"),
        device="cuda",
        launcher="slurm",
    )
    env = environment(FakeBackend(), base, RankContext(local_rank=1, local_world_size=2))
    assert env[RANK_GPU] == H100 and env["device_model"] == H100  # rank 1's GPU, as its worker sees it

    node: dict[str, Any] = {"gpu": a100, "fits": 37}  # the compute node Slurm places the probes on

    def on_node(spec: PointSpec, launchers: Launchers, python: str, on_progress: object = None) -> PointResult:
        fits = spec.batch_size <= node["fits"]
        steps = spec.protocol.steps
        ranks = [RankRaw(0, (RepeatRaw((0.01,) * steps, 0.01 * steps),))] if fits else []
        reported = WorkerResult(
            status="ok" if fits else "oom",
            error=None if fits else "CUDA out of memory",
            ranks=ranks,
            env={RANK_GPU: str(node["gpu"]), "device_model": str(node["gpu"])},
        )
        return point_result(spec, reported.status, reported, reported.error, [], 0.0)

    monkeypatch.setattr(maxbatch, "execute", on_node)
    store = Store(tmp_path / "s.db")
    on_a100 = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert on_a100.max_batch == 37 and on_a100.exact
    node.update(gpu=H100, fits=50)
    on_h100 = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert on_h100.max_batch == 50 and on_h100.exact and not any(p.cached for p in on_h100.probes)
    again = maxbatch.search(store, base, 1, 64, launchers=Launchers())
    assert again.max_batch == 50 and again.new_probes == 1 and again.probes[0].value == 1
