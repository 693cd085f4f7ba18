"""Workers that run out of memory, segfault, hang or raise each leave the right status, and the run goes on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.launch.point import execute
from dlbench.launch.registry import Launchers
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


def spec(**kw: object) -> PointSpec:
    base: dict[str, object] = dict(
        framework="fake", model="resnet50", batch_size=4, protocol=Protocol(1, 3, 2, "median"), timeout_s=20.0
    )
    return PointSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mode, status, message",
    [
        ("oom", "oom", "MemoryError: fake out of memory"),
        ("segfault", "crashed", "SIGSEGV"),
        ("raise", "error", "RuntimeError: fake failure in the model"),
        ("nan", "failed_check", "final loss is not finite"),
    ],
)
def test_failure_statuses(monkeypatch: pytest.MonkeyPatch, mode: str, status: str, message: str) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", mode)
    r = execute(spec(), Launchers.build())
    assert r.status == status
    assert message in (r.error or "")
    assert r.metrics is None


def test_hang_becomes_timeout_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "hang")
    r = execute(spec(timeout_s=2.0), Launchers.build())
    assert r.status == "timeout" and "2 s timeout" in (r.error or "")
    assert r.finished - r.started < 15


def test_error_keeps_the_last_lines_of_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "raise")
    r = execute(spec(), Launchers.build())
    assert any("fake failure" in line for line in r.extra["tail"])  # type: ignore[union-attr]


def test_memory_limit_stops_the_worker_as_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep_at_build:5")
    r = execute(spec(memory_limit_bytes=1024 * 1024), Launchers.build())  # 1 MiB: any Python process passes it at once
    assert r.status == "oom" and "memory limit" in (r.error or "")


def test_a_run_goes_on_past_failed_points(
    monkeypatch: pytest.MonkeyPatch, store_path: Path, cli: Callable[..., CliResult]
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "alexnet=segfault,vgg16=hang,bert_base=oom")
    code, out, _ = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "alexnet,vgg16,bert_base,resnet50",
        "--timeout",
        "3",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--store",
        str(store_path),
    )
    assert code == 1  # some points failed
    statuses = {p.result.spec.model: p.result.status for p in Store(store_path).points()}
    assert statuses == {"alexnet": "crashed", "vgg16": "timeout", "bert_base": "oom", "resnet50": "ok"}
    assert "crashed" in out and "timeout" in out


def test_results_json_holds_raw_window_times(
    monkeypatch: pytest.MonkeyPatch, store_path: Path, cli: Callable[..., CliResult]
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.002")
    code, _, _ = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "--warmup",
        "1",
        "--steps",
        "4",
        "--repeats",
        "2",
        "--store",
        str(store_path),
    )
    assert code == 0
    code, out, _ = cli("results", "--format", "json", "--store", str(store_path))
    [point] = json.loads(out)
    repeats = point["ranks"][0]["repeats"]
    # window timing: the 4 measured steps in windows, each window's time and step count kept
    assert len(repeats) == 2 and all(sum(r["window_steps"]) == 4 for r in repeats)
    assert all(t >= 0.002 * n for r in repeats for t, n in zip(r["window_s"], r["window_steps"]))
    assert point["metrics"]["throughput"] > 0
    assert point["env"]["identity"]["framework"] == "fake"
