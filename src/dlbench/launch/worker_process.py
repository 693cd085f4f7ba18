"""Start ``<python> -m dlbench.worker`` as a child, watch it, and turn every way it can end into a status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dlbench.spec import PointSpec
from dlbench.worker import PROGRESS_PREFIX

ProgressSink = Callable[[dict[str, object]], None]
TAIL_LINES = 15


@dataclass
class ChildOutcome:
    """How a worker ended: its status, its result payload (if it wrote one) and its last output lines."""

    status: str
    payload: dict[str, object] = field(default_factory=dict)
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def tree_rss(proc: psutil.Process) -> int:
    """Resident memory of a process and all its children (0 once it has gone)."""
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in members:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def kill_group(popen: subprocess.Popen[str]) -> None:
    """SIGKILL the child's whole session (it was started with start_new_session)."""
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def worker_env(spec: PointSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: this one, the thread count set the same way for every framework."""
    env = dict(os.environ)
    threads = spec.threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_command(argv: Sequence[str], spec: PointSpec, result_path: Path, env: dict[str, str],
                on_progress: ProgressSink | None = None, poll_s: float = 0.05) -> ChildOutcome:
    """Run argv (a list, never a shell string) until it ends, times out, or passes the memory limit."""
    start = time.monotonic()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)

    def pump() -> None:
        assert popen.stdout is not None
        for line in popen.stdout:
            if line.startswith(PROGRESS_PREFIX):
                if on_progress:
                    try:
                        on_progress(json.loads(line[len(PROGRESS_PREFIX):]))
                    except json.JSONDecodeError:
                        pass
            elif line.strip():
                tail.append(line.rstrip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    proc = psutil.Process(popen.pid)
    killed: str | None = None
    peak_tree = 0
    try:
        while popen.poll() is None:
            if time.monotonic() - start > spec.timeout_s:
                killed = "timeout"
            elif spec.memory_limit_bytes is not None:
                peak_tree = max(peak_tree, tree_rss(proc))
                if peak_tree > spec.memory_limit_bytes:
                    killed = "oom"
            if killed:
                kill_group(popen)
                popen.wait()
                break
            time.sleep(poll_s)
    except BaseException:  # Ctrl-C in the controller: the worker is in its own session, so stop it here
        kill_group(popen)
        popen.wait()
        raise
    kill_group(popen)  # leftovers such as loader workers
    reader.join(timeout=5)
    wall = time.monotonic() - start
    lines = list(tail)
    if killed == "timeout":
        return ChildOutcome("timeout", error=f"exceeded the {spec.timeout_s:g} s timeout", tail=lines, wall_s=wall)
    if killed == "oom":
        return ChildOutcome("oom", error=f"passed the memory limit of {spec.memory_limit_bytes} bytes "
                                         f"(reached {peak_tree})", tail=lines, wall_s=wall)
    code = popen.returncode
    if result_path.exists():
        payload = json.loads(result_path.read_text())
        status = str(payload.get("status", "error"))
        error = payload.get("error")
        if payload.get("traceback"):
            lines = [*lines, *payload["traceback"]][-TAIL_LINES:]  # type: ignore[list-item]
        return ChildOutcome(status, payload=payload, error=str(error) if error else None, tail=lines, wall_s=wall)
    if code is not None and code < 0:
        name = _signal_name(code)
        if name == "SIGKILL":
            return ChildOutcome("oom", error="killed by SIGKILL, most likely the kernel's out-of-memory killer",
                                tail=lines, wall_s=wall)
        return ChildOutcome("crashed", error=f"worker died from {name}", tail=lines, wall_s=wall)
    last = lines[-1] if lines else "no output"
    return ChildOutcome("error", error=f"worker exited with code {code} without a result: {last}",
                        tail=lines, wall_s=wall)


def run_local(spec: PointSpec, python: str = sys.executable, on_progress: ProgressSink | None = None,
              env_extra: dict[str, str] | None = None) -> ChildOutcome:
    """Run one point in one child worker process with the given interpreter."""
    with tempfile.TemporaryDirectory(prefix="dlbench-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec.to_json())
        argv = [python, "-m", "dlbench.worker", str(spec_path), str(result_path)]
        return run_command(argv, spec, result_path, worker_env(spec, env_extra), on_progress)
