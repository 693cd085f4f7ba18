"""A point measured while another process burns the point's CPU is flagged as under contention: real /proc/stat,
a real busy loop, a tiny fake-backend point through `dlbench run`. The test pins itself (and so the point) and
the busy loop to one CPU, so that one busy core is the same share on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CliResult = tuple[int, str, str]


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """Pin this thread (the controller; the workers it starts inherit it) to one CPU for the test."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform: the busy loop could not be put on the point's CPU")
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def test_a_point_beside_a_busy_loop_is_flagged_as_contended(one_cpu: int, monkeypatch: pytest.MonkeyPatch,
                                                            store_path: Path, cli: Callable[..., CliResult]) -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # started pinned: it inherits one_cpu
    try:
        monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.1")
        code, out, _ = cli("run", "-f", "fake", "-m", "resnet50", "-b", "2", "--warmup", "1", "--steps", "3",
                           "--repeats", "1", "--store", str(store_path))
        code_json, js, _ = cli("results", "--format", "json", "--store", str(store_path))
    finally:
        burner.kill()
        burner.wait()
    assert code == 0 and code_json == 0
    [point] = json.loads(js)
    share = point["extra"]["telemetry"]["contention"]["others_share"]
    assert point["telemetry_summary"]["contended"] is True and share > 0.25, share
    assert "contended" in out and "measured under contention" in out
