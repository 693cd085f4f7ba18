"""A point measured while another process burns the point's CPU is flagged as under contention: real /proc/stat,
a real busy loop, a tiny fake-backend point through `dlbench run`. The test pins itself (and so the point) and
the busy loop to one CPU, so that one busy core is the same share on any machine."""

from __future__ import annotations

import json
import os
import signal
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


def _orphan_busy_loop() -> int:
    """A busy loop that is not this process's descendant (the in-process controller counts its own descendants as
    the point's): a shell starts it in the background and exits, so init adopts it. It inherits one_cpu."""
    shell = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(shell.stdout.strip())


def test_a_point_beside_a_busy_loop_is_flagged_as_contended(
    one_cpu: int, monkeypatch: pytest.MonkeyPatch, store_path: Path, cli: Callable[..., CliResult]
) -> None:
    burner = _orphan_busy_loop()
    try:
        monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.1")
        code, out, _ = cli(
            "run",
            "-f",
            "fake",
            "-m",
            "resnet50",
            "-b",
            "2",
            "--warmup",
            "1",
            "--steps",
            "3",
            "--repeats",
            "1",
            "--store",
            str(store_path),
        )
        code_json, js, _ = cli("results", "--format", "json", "--store", str(store_path))
    finally:
        os.kill(burner, signal.SIGKILL)
    assert code == 0 and code_json == 0
    [point] = json.loads(js)
    share = point["extra"]["telemetry"]["contention"]["others_share"]
    assert point["telemetry_summary"]["contended"] is True and share > 0.25, share
    assert "contended" in out and "measured under contention" in out
