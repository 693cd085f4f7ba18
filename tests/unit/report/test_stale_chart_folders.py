"""A report's temporary chart folder left by a writer killed outright (kill -9 skips every cleanup) is removed by
the next report written beside it; one whose writer is still alive is left alone (report/files.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dlbench
from dlbench.report.files import STALE_AFTER_S, remove_stale_temp_folders, temp_folder_beside

WRITER = """
import sys, time
from pathlib import Path
from dlbench.report.files import temp_folder_beside
print(temp_folder_beside(Path(sys.argv[1])), flush=True)
time.sleep(600)
"""


def _writer(path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that made a temporary chart folder beside path and holds it (as a report being written does)."""
    env = {**os.environ, "PYTHONPATH": str(Path(dlbench.__file__).parents[1])}  # the dlbench under test
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    folder = Path(proc.stdout.readline().strip())  # the ready line: the folder exists and is locked
    old = time.time() - 2 * STALE_AFTER_S
    os.utime(folder, (old, old))
    return proc, folder


def test_a_killed_writers_folder_goes_and_a_live_writers_stays(tmp_path: Path) -> None:
    charts = tmp_path / "report_files"
    killed, stale = _writer(charts)
    alive, busy = _writer(charts)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        assert stale.is_dir() and busy.is_dir()
        mine = temp_folder_beside(charts)  # the next writer
        assert not stale.exists() and busy.is_dir() and mine.is_dir()
        assert remove_stale_temp_folders(charts) == []  # mine is locked by this process and young
    finally:
        alive.kill()
        alive.wait(30)


def test_a_young_unlocked_folder_is_not_judged(tmp_path: Path) -> None:
    """Between mkdtemp and its lock a folder is unlocked for a moment: one younger than a minute is never removed."""
    young = tmp_path / ".report_files.abc.tmp"
    young.mkdir()
    assert remove_stale_temp_folders(tmp_path / "report_files") == [] and young.is_dir()
