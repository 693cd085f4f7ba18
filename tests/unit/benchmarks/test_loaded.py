"""benchmarks/busy.py holds a core busy and stops when told; benchmarks/loaded.py runs `dlbench run` quiet and
beside it, and writes the table for the docs (here at the smallest size, with the fake backend)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.paths import REPO

BENCHMARKS = REPO / "benchmarks"
sys.path[:0] = [str(BENCHMARKS)]
import loaded  # noqa: E402 - benchmarks/loaded.py


def test_the_burner_holds_a_core_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / "busy.py"), "--cores", "1"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        [pid] = [int(p) for p in line.split("pids", 1)[1].split()]
        burner = psutil.Process(pid)
        before = sum(burner.cpu_times()[:2])
        time.sleep(1.0)
        assert sum(burner.cpu_times()[:2]) > before  # it spins (how much depends on what else the machine runs)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_loaded_writes_a_table_of_each_side_against_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.01")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "loaded.md"
    point = ["-f", "fake", "-m", "resnet50", "-b", "2", "--warmup", "0", "--steps", "2", "--repeats", "1"]
    assert loaded.main(["--rounds", "1", "--sides", "quiet,loaded", "--out", str(out), "--", *point]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out.rstrip("\n") + "\n"
    rows = [line for line in text.splitlines() if line.startswith("| quiet") or line.startswith("| loaded")]
    assert len(rows) == 2 and all("| resnet50 |" in r for r in rows)
    assert "loaded took" in text and "the 2x goal" in text
    with pytest.raises(SystemExit):
        loaded.main(["--sides", "noisy"])
