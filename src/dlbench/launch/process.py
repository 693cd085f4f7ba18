"""Child processes of a point: start argv lists (never shell strings), read their output, watch their time and
memory, and stop them and everything they started (how they ended is launch/outcome.py's). Imports no framework.

Every command starts in its own session, and with the kernel asked to SIGKILL it when the controller dies
(PR_SET_PDEATHSIG), so that a `kill -9` of dlbench leaves no engine (torchrun, mpirun) training on; the worker
asks the same of whatever started it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import psutil

from dlbench.launch.outcome import TAIL_LINES, GroupOutcome
from dlbench.spec import PointSpec
from dlbench.wire import ALLOCATOR_VARS, THREAD_VARS, WATCHER_VAR, parse_progress, watcher_token

ProgressSink = Callable[[dict[str, object]], None]
# The store and its credentials stay with the controller, which alone writes results: no worker, local or remote,
# receives them (a remote rank's env file lies in a shared job folder; Slurm keeps a job's environment).
CONTROLLER_ONLY_VARS: tuple[str, ...] = ("DLBENCH_STORE", "PGPASSWORD")
GRACE_S = 15.0  # after one command fails, how long the others get to write their own error before the kill


class OutputReader:
    """Turns a child's output, line by line or chunk by chunk, into progress events and a tail of other lines."""

    def __init__(self, sink: ProgressSink | None, keep: int = TAIL_LINES) -> None:
        self.sink = sink
        self.tail: deque[str] = deque(maxlen=keep)
        self.partial = ""

    def line(self, text: str) -> None:
        """One output line: a progress event goes to the sink, any other non-blank line to the tail."""
        event = parse_progress(text)
        if event is not None:
            if self.sink:
                self.sink(event)
        elif text.strip():
            self.tail.append(text.rstrip())

    def feed(self, chunk: str) -> None:
        """Output that may end mid-line (a file being appended to); complete lines are read now."""
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        for text in lines:
            self.line(text)


def _rss_each(proc: psutil.Process) -> list[int]:
    """Resident memory of a process and of each of its children (empty once it has gone)."""
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in members:
        try:
            out.append(p.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def largest_rss(procs: Sequence[psutil.Process]) -> int:
    """The resident memory of the largest single process under any of procs: what an emulated device budget
    is compared with. A budget is per device, and a rank is one process; a launcher (torchrun), a loader worker
    or a compile worker holds no device memory and is not added to a rank."""
    return max((r for p in procs for r in _rss_each(p)), default=0)


def kill_group(popen: subprocess.Popen[str]) -> None:
    """SIGKILL the child's whole session (it was started with start_new_session)."""
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_controller() -> None:
    """In the child before exec (Linux): be SIGKILLed when the controller dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass


def worker_env(spec: PointSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: this one less the store's credentials (CONTROLLER_ONLY_VARS), the thread count and
    the allocator policy set the same way for every framework, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLER_ONLY_VARS}
    threads = spec.threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    for var in THREAD_VARS:
        env[var] = str(threads)
    for var, value in ALLOCATOR_VARS.items():
        env.setdefault(var, value)
    env["PYTHONUNBUFFERED"] = "1"
    env[WATCHER_VAR] = watcher_token(os.getpid())  # telemetry: this controller samples the workers it can see
    env.update(extra or {})
    return env


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (/proc/vmstat oom_kill,
    Linux 4.13+); None where the counter cannot be read."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _start(argv: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_controller,
    )


def interrupt_and_wait(popens: Sequence[subprocess.Popen[str]], grace_s: float, poll_s: float = 0.05) -> None:
    """Send SIGINT to each running command's session (the terminal's Ctrl-C reaches only the controller's) and
    wait up to grace_s for them all to end."""
    for p in popens:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in popens) and time.monotonic() < deadline:
        time.sleep(poll_s)


def run_group(
    commands: Sequence[Sequence[str]],
    spec: PointSpec,
    env: dict[str, str] | Sequence[dict[str, str]],
    on_progress: ProgressSink | None = None,
    grace_s: float = GRACE_S,
    poll_s: float = 0.05,
    stop_gently: bool = False,
) -> GroupOutcome:
    """Run argv lists side by side until all end; every wait is bounded.

    Ctrl-C in the controller kills the group and propagates; with `stop_gently` (a convergence run, which keeps
    its curve so far) the commands first get the SIGINT themselves and up to `grace_s` to write their result.

    The group is killed when it passes the spec's timeout or memory limit (the largest single process's
    resident memory: one rank is one device), and the survivors are killed `grace_s` after the first command
    fails (a peer of a dead rank may otherwise wait for it for long). A single worker is a group of one.
    """
    envs = [env] * len(commands) if isinstance(env, dict) else list(env)
    kills_before = oom_kills()
    start = time.monotonic()
    readers = [OutputReader(on_progress) for _ in commands]
    popens = _start_all(commands, envs)
    if isinstance(popens, GroupOutcome):
        return replace(popens, wall_s=time.monotonic() - start)

    def pump(i: int) -> None:
        stream = popens[i].stdout
        assert stream is not None
        for text in stream:
            readers[i].line(text)

    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(len(popens))]
    for t in threads:
        t.start()
    killed, peak = _watch(popens, spec, start, grace_s, poll_s, stop_gently)
    codes = _reap(popens)
    for t in threads:
        t.join(timeout=5)
    after = oom_kills()
    return GroupOutcome(
        codes,
        killed,
        [list(r.tail) for r in readers],
        time.monotonic() - start,
        peak,
        after - kills_before if after is not None and kills_before is not None else 0,
    )


def _start_all(
    commands: Sequence[Sequence[str]], envs: Sequence[dict[str, str]]
) -> list[subprocess.Popen[str]] | GroupOutcome:
    """Start every command, each in its own session; where one cannot start (the reach command or the engine is
    not installed), the ones started are killed and the outcome says which could not (exit 127)."""
    popens: list[subprocess.Popen[str]] = []
    for argv, e in zip(commands, envs):
        try:
            popens.append(_start(argv, e))
        except OSError as exc:
            for p in popens:
                kill_group(p)
                p.wait()
            why: list[list[str]] = [[] for _ in commands]
            why[len(popens)] = [f"cannot start {argv[0]}: {exc.strerror or exc}"]
            failed: list[int | None] = [None] * len(commands)
            failed[len(popens)] = 127
            return GroupOutcome(failed, None, why)
    return popens


def _watch(
    popens: list[subprocess.Popen[str]], spec: PointSpec, start: float, grace_s: float, poll_s: float, stop_gently: bool
) -> tuple[str | None, int]:
    """Wait for the group, killing it past the spec's timeout or memory limit or `grace_s` after a first failure:
    (why it was killed or None, the largest single process' peak RSS seen). Ctrl-C or SIGTERM stops every command
    (gently first with `stop_gently`) and propagates."""
    procs = [psutil.Process(p.pid) for p in popens]
    killed: str | None = None
    first_failure: float | None = None
    peak = 0
    try:
        while any(p.poll() is None for p in popens):
            now = time.monotonic()
            if now - start > spec.timeout_s:
                killed = "timeout"
            elif spec.memory_limit_bytes is not None:
                peak = max(peak, largest_rss(procs))
                if peak > spec.memory_limit_bytes:
                    killed = "oom"
            if first_failure is None and any(p.poll() not in (None, 0) for p in popens):
                first_failure = now
            if first_failure is not None and now - first_failure > grace_s:
                killed = killed or "peer_failed"
            if killed:
                break
            time.sleep(poll_s)
    except BaseException as exc:  # Ctrl-C or SIGTERM in the controller: every command is in its own session, stop them
        try:
            if stop_gently and isinstance(exc, KeyboardInterrupt):
                interrupt_and_wait(popens, grace_s)
        finally:  # a second Ctrl-C while they finish still kills them
            for p in popens:
                kill_group(p)
                p.wait()
        raise
    return killed, peak


def _reap(popens: list[subprocess.Popen[str]]) -> list[int | None]:
    """Each command's exit code (None: still running, so killed here) once its whole session is killed (leftovers
    such as loader workers or torchrun's children)."""
    codes: list[int | None] = []
    for p in popens:
        running = p.poll() is None
        kill_group(p)
        p.wait()
        codes.append(None if running else p.returncode)
    return codes


__all__ = [
    "CONTROLLER_ONLY_VARS",
    "OutputReader",
    "ProgressSink",
    "interrupt_and_wait",
    "kill_group",
    "largest_rss",
    "oom_kills",
    "run_group",
    "worker_env",
]
