"""SIGTERM (a scheduler's or a user's `kill`) stops a run like Ctrl-C: every worker, one per rank included,
is stopped, the run is marked interrupted, and the controller exits 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dlbench.backends.fake import READY_VAR
from dlbench.store.store import Store


def _workers(proc: subprocess.Popen[bytes], n: int, timeout: float = 60) -> list[psutil.Process]:
    """The controller's worker processes, once n of them run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if "dlbench.worker" in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.NoSuchProcess:  # a short-lived helper process ended meanwhile
                pass
        if len(found) >= n:
            return found
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"fewer than {n} workers after {timeout} s")


def _ready(path: Path, proc: subprocess.Popen[bytes], n: int, timeout: float = 60) -> None:
    """Wait until n "hang" workers wrote their ready line (each is past its start-up, where it asked the kernel
    to kill it with its parent): the fake backend appends one to $DLBENCH_FAKE_READY's file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        if len([x for x in lines if x.startswith("ready ")]) >= n:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"fewer than {n} ready lines in {path} after {timeout} s")


@pytest.mark.parametrize("devices", [1, 2])
def test_sigterm_stops_every_worker_and_marks_the_run(tmp_path: Path, devices: int) -> None:
    db = tmp_path / "s.db"
    argv = [sys.executable, "-m", "dlbench", "run", "-f", "fake", "-m", "resnet50", "-b", "2", "--store", str(db)]
    # the 1-device point a speedup needs, stored first, so that the run goes straight to its ranks
    subprocess.run(argv, env={**os.environ, "DLBENCH_FAKE": "sleep:0.001"}, capture_output=True, check=True)
    env = {**os.environ, "DLBENCH_FAKE": "hang"}  # workers that would wait an hour
    proc = subprocess.Popen(
        [*argv, "--devices-per-node", str(devices), "--launcher", "local"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    workers = _workers(proc, devices)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [p.pid for p in alive]
    run = Store(db, readonly=True).runs()[0]  # the newest
    assert run.status == "interrupted"


def test_kill_9_of_the_controller_takes_its_worker_down(tmp_path: Path) -> None:
    """No handler runs on SIGKILL: the worker asked the kernel to kill it when its parent dies."""
    ready = tmp_path / "ready"
    env = {**os.environ, "DLBENCH_FAKE": "hang", READY_VAR: str(ready)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlbench",
            "run",
            "-f",
            "fake",
            "-m",
            "resnet50",
            "-b",
            "2",
            "--store",
            str(tmp_path / "s.db"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = _workers(proc, 1)
    _ready(ready, proc, 1)  # past the worker's start-up, where it makes the request
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [p.pid for p in alive]
    Store(tmp_path / "s.db", readonly=True).runs()  # the store opens


@pytest.mark.parametrize("launcher", ["local", "torchrun"])
def test_kill_9_leaves_no_process_and_the_next_run_removes_the_folder(tmp_path: Path, launcher: str) -> None:
    """kill -9 of the controller mid-point: the engine (torchrun) and every rank die with it, and the point's
    folder it could not remove is removed by the next controller on this host."""
    jobs = tmp_path / "jobs"
    ready = tmp_path / "ready"
    env = {**os.environ, "DLBENCH_FAKE": "hang", "DLBENCH_JOB_DIR": str(jobs), READY_VAR: str(ready)}
    one = [
        sys.executable,
        "-m",
        "dlbench",
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "-b",
        "2",
        "--store",
        str(tmp_path / "s.db"),
    ]
    quick = {**env, "DLBENCH_FAKE": "sleep:0.001"}
    subprocess.run(one, env=quick, capture_output=True, check=True)  # the 1-device baseline, so ranks start at once
    argv = [*one, "--devices-per-node", "2", "--launcher", launcher]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = _workers(proc, 2, timeout=120)
    _ready(ready, proc, 2, timeout=120)  # past the workers' start-up, where they ask to die with their parent
    everything = psutil.Process(proc.pid).children(recursive=True)
    assert launcher == "local" or any("torch.distributed.run" in " ".join(p.cmdline()) for p in everything)
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(everything + workers, timeout=20)
    assert not alive, [(p.pid, p.name()) for p in alive]
    left = list(jobs.glob("dlbench-*"))
    assert len(left) == 1  # SIGKILL runs no clean-up
    subprocess.run(one, env=quick, capture_output=True, check=True)
    assert not left[0].exists()
