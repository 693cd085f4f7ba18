"""The test harness's private PostgreSQL server ends with the test process that started it (#41): a pytest killed
part-way (kill -9: no fixture teardown, no atexit) left its server running, orphaned. A watchdog (pg_watchdog.py)
now stops it; here a pytest is started, holds a server, and is killed, and no server is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.stores import ENV_URL, _bin_dir

REPO = Path(__file__).parents[3]
HOLD = """\
import os
import time
from pathlib import Path

from tests.support.stores import pg_server  # noqa: F401  (the fixture)


def test_hold(pg_server):
    Path(os.environ["DLBENCH_TEST_MARK"]).write_text(str(pg_server.data_dir))
    time.sleep(300)
"""


def _postmaster(data: Path) -> psutil.Process | None:
    try:
        return psutil.Process(int((data / "postmaster.pid").read_text().split()[0]))
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        return None


def test_a_killed_pytest_leaves_no_server(tmp_path: Path) -> None:
    if _bin_dir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb) to start a private server with")
    (tmp_path / "test_hold.py").write_text(HOLD)
    mark = tmp_path / "mark"
    env = {k: v for k, v in os.environ.items() if k != ENV_URL}  # a private server, not the CI's
    env.update(DLBENCH_TEST_MARK=str(mark), PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(tmp_path / "test_hold.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not mark.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.skip(f"the inner pytest could not start a server: {out[-500:]}")
        time.sleep(0.2)
    data = Path(mark.read_text())
    server = _postmaster(data)
    assert server is not None and server.is_running()
    proc.send_signal(signal.SIGKILL)  # no teardown, no atexit
    proc.wait(timeout=30)
    _, alive = psutil.wait_procs([server], timeout=30)
    assert not alive, f"postmaster {server.pid} still runs after its pytest was killed"
    deadline = time.monotonic() + 30
    while data.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not data.parent.exists(), f"{data.parent} left behind"
