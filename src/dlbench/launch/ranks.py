"""Several ranks of one point: the rank contract, per-rank result files, running a group of commands with
every wait bounded, and merging what the ranks left into one outcome. Imports no framework.

The contract a multi-rank backend plugs into (torch now; JAX, TF and others later):

- whichever engine started it (torchrun, srun, mpirun, the hosts launcher), the worker finds
  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in its environment: ``configure_rank`` translates
  Slurm's SLURM_PROCID ... and Open MPI's OMPI_COMM_WORLD_RANK ... into them, and splits the node's CPU
  cores between its ranks (OMP_NUM_THREADS ...) unless the spec fixes the thread count;
- DLBENCH_RDZV_TIMEOUT bounds the backend's own rendezvous (seconds);
- DLBENCH_NODE_HOSTS lists the node hosts (node 0 first) for frameworks that name every worker (TF_CONFIG);
  rank r runs on node r // devices_per_node; under Slurm the worker fills it from SLURM_JOB_NODELIST;
- the backend initialises its distributed runtime from those variables in ``build()`` when the spec's world
  size is above 1 (torch: ``init_process_group``; JAX: ``jax.distributed.initialize``; TF: ``TF_CONFIG``);
- its trainer offers ``param_checksum()`` (``ChecksumTrainer``); the controller compares the ranks' values and
  fails the point with ``failed_check`` when they differ, or when a rank reports none;
- each rank writes ``rank_result_path(RESULT, rank)``; ``collect`` merges them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import psutil

from dlbench.launch.worker_process import TAIL_LINES, ChildOutcome, ProgressSink, kill_group, tree_rss
from dlbench.spec import PointSpec
from dlbench.worker import PROGRESS_PREFIX

RDZV_TIMEOUT_VAR = "DLBENCH_RDZV_TIMEOUT"
JOB_DIR_VAR = "DLBENCH_JOB_DIR"
NODE_HOSTS_VAR = "DLBENCH_NODE_HOSTS"  # comma-separated node hosts, node 0 first (on Slurm: from its node list)
THREAD_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The engines' names for (RANK, WORLD_SIZE, LOCAL_RANK), in the order they are tried.
ENGINE_VARS: tuple[tuple[str, str, str], ...] = (
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)
CHECKSUM_REL_TOL = 1e-9  # identical parameters give identical sums; 1e-9 only absorbs different CPUs' rounding
GRACE_S = 15.0  # after one command fails, how long the others get to write their own error before the kill


@runtime_checkable
class ChecksumTrainer(Protocol):
    """A trainer whose parameters can be compared across ranks."""

    def param_checksum(self) -> float:
        """A number that differs when the parameters differ (computed after the timed steps)."""


def rank_result_path(result: Path, rank: int) -> Path:
    """Where rank `rank` writes its result when a point has several ranks."""
    return result.with_name(f"{result.stem}.rank{rank}{result.suffix}")


def configure_rank(spec: PointSpec, environ: MutableMapping[str, str]) -> int:
    """Worker side: fill RANK/WORLD_SIZE/LOCAL_RANK from the engine's variables, split cores; returns the rank."""
    if spec.world_size > 1 and "RANK" not in environ:
        for rank_var, size_var, local_var in ENGINE_VARS:
            if rank_var in environ:
                environ["RANK"] = environ[rank_var]
                environ.setdefault("WORLD_SIZE", environ.get(size_var, str(spec.world_size)))
                environ.setdefault("LOCAL_RANK", environ.get(local_var, "0"))
                break
    if spec.world_size > 1:
        environ.setdefault("LOCAL_RANK", "0")
        environ.setdefault("WORLD_SIZE", str(spec.world_size))
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        threads = spec.threads or max(1, cores // spec.devices_per_node)
        for var in THREAD_VARS:
            environ[var] = str(threads)
    return int(environ.get("RANK", "0"))


def free_port() -> int:
    """A TCP port free on this machine right now (for a rendezvous hosted here)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class JobFiles:
    """A point's folder, its spec file (written) and the result path its ranks write next to."""

    folder: Path
    spec: Path
    result: Path


@contextmanager
def job_files(spec: PointSpec, shared: bool) -> Iterator[JobFiles]:
    """A fresh folder holding the spec, removed afterwards.

    It lies under $DLBENCH_JOB_DIR where set. Otherwise ranks on other machines (shared=True) need a folder
    they see too: ./dlbench-results/jobs, on clusters usually a shared file system; else the system temp folder.
    """
    base: str | None = None
    if os.environ.get(JOB_DIR_VAR) or shared:
        root = Path(os.environ.get(JOB_DIR_VAR) or Path.cwd() / "dlbench-results" / "jobs").resolve()
        root.mkdir(parents=True, exist_ok=True)
        base = str(root)
    with tempfile.TemporaryDirectory(prefix="dlbench-", dir=base) as tmp:
        files = JobFiles(Path(tmp), Path(tmp) / "spec.json", Path(tmp) / "result.json")
        files.spec.write_text(spec.to_json())
        yield files


@dataclass
class GroupOutcome:
    """How a group of commands ended: exit codes (None = killed), why killed, output tails, wall time."""

    codes: list[int | None]
    killed: str | None = None
    tails: list[list[str]] = field(default_factory=list)
    wall_s: float = 0.0
    peak_rss: int = 0


def _tree_rss(procs: Sequence[psutil.Process]) -> int:
    """Resident memory of every rank's process tree."""
    return sum(tree_rss(p) for p in procs)


def run_group(commands: Sequence[Sequence[str]], spec: PointSpec, env: dict[str, str] | Sequence[dict[str, str]],
              on_progress: ProgressSink | None = None, grace_s: float = GRACE_S,
              poll_s: float = 0.05) -> GroupOutcome:
    """Run argv lists (never shell strings) side by side until all end; every wait is bounded.

    The group is killed when it passes the spec's timeout or memory limit, and the survivors are killed
    `grace_s` after the first command fails (a peer of a dead rank may otherwise wait for it for long).
    """
    envs = [env] * len(commands) if isinstance(env, dict) else list(env)
    start = time.monotonic()
    tails: list[deque[str]] = [deque(maxlen=TAIL_LINES) for _ in commands]
    popens: list[subprocess.Popen[str]] = []
    for argv, e in zip(commands, envs):
        try:
            popens.append(subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True, env=e, start_new_session=True))
        except OSError as exc:  # e.g. the reach command or the engine is not installed
            for p in popens:
                kill_group(p)
                p.wait()
            why: list[list[str]] = [[] for _ in commands]
            why[len(popens)] = [f"cannot start {argv[0]}: {exc.strerror or exc}"]
            failed: list[int | None] = [None] * len(commands)
            failed[len(popens)] = 127
            return GroupOutcome(failed, None, why, time.monotonic() - start)

    def pump(i: int) -> None:
        stream = popens[i].stdout
        assert stream is not None
        for line in stream:
            if line.startswith(PROGRESS_PREFIX):
                if on_progress:
                    try:
                        on_progress(json.loads(line[len(PROGRESS_PREFIX):]))
                    except json.JSONDecodeError:
                        pass
            elif line.strip():
                tails[i].append(line.rstrip())

    readers = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(len(popens))]
    for r in readers:
        r.start()
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
                peak = max(peak, _tree_rss(procs))
                if peak > spec.memory_limit_bytes:
                    killed = "oom"
            if first_failure is None and any(p.poll() not in (None, 0) for p in popens):
                first_failure = now
            if first_failure is not None and now - first_failure > grace_s:
                killed = killed or "peer_failed"
            if killed:
                break
            time.sleep(poll_s)
    except BaseException:  # Ctrl-C or SIGTERM in the controller: every rank is in its own session, stop them
        for p in popens:
            kill_group(p)
            p.wait()
        raise
    codes: list[int | None] = []
    for p in popens:
        running = p.poll() is None
        kill_group(p)  # the whole session: leftovers such as loader workers or torchrun's children
        p.wait()
        codes.append(None if running else p.returncode)
    for r in readers:
        r.join(timeout=5)
    return GroupOutcome(codes, killed, [list(t) for t in tails], time.monotonic() - start, peak)


def _last_line(lines: Sequence[str]) -> str:
    """The most telling output line: the last one naming an error, else the last one."""
    for line in reversed(lines):
        low = line.lower()
        if any(word in low for word in ("error", "exception", "failed", "timed out", "timeout", "refused",
                                        "cannot", "no such", "unreachable", "killed", "signal")):
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else "no output"


def group_failure(spec: PointSpec, group: GroupOutcome, labels: Sequence[str]) -> ChildOutcome | None:
    """A failed outcome when the group was killed or a command failed, with a one-line reason; else None."""
    tail = [f"[{labels[i]}] {line}" if len(labels) > 1 else line
            for i, t in enumerate(group.tails) for line in t][-TAIL_LINES * 2:]
    if group.killed == "timeout":
        return ChildOutcome("timeout", error=f"exceeded the {spec.timeout_s:g} s timeout", tail=tail,
                            wall_s=group.wall_s)
    if group.killed == "oom":
        return ChildOutcome("oom", error=f"passed the memory limit of {spec.memory_limit_bytes} bytes "
                                         f"(reached {group.peak_rss})", tail=tail, wall_s=group.wall_s)
    bad = [i for i, c in enumerate(group.codes) if c not in (0, None)]
    if not bad:
        return None
    i = bad[0]
    code = group.codes[i]
    assert code is not None
    died = code < 0 and -code in signal.valid_signals()
    how = f"died from {signal.Signals(-code).name}" if died else f"exited with code {code}"
    return ChildOutcome("crashed" if died else "error", error=f"{labels[i]} {how}: {_last_line(group.tails[i])}",
                        tail=tail, wall_s=group.wall_s)


def _read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _part(payload: dict[str, object], key: str) -> dict[str, object]:
    """A dict-valued part of a payload ('env', 'extra'), {} when absent or malformed."""
    value = payload.get(key)
    return dict(value) if isinstance(value, dict) else {}


def _lines(payload: dict[str, object], key: str) -> list[str]:
    """A list-valued part of a payload as strings ('traceback'), [] when absent."""
    value = payload.get(key)
    return [str(x) for x in value] if isinstance(value, list) else []


def _rank_raw(payload: dict[str, object]) -> dict[str, object]:
    """The one rank record an ok worker payload carries."""
    value = payload.get("ranks")
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], dict):
        raise ValueError("a rank's result must carry exactly one rank record")
    return dict(value[0])


def merge(spec: PointSpec, payloads: dict[int, dict[str, object]]) -> ChildOutcome:
    """One outcome from every rank's payload: a missing or failed rank fails the point; checksums must agree."""
    missing = [r for r in range(spec.world_size) if r not in payloads]
    failed = [r for r in sorted(payloads) if payloads[r].get("status") != "ok"]
    if missing or failed:
        reasons = [f"rank(s) {', '.join(map(str, missing))} of {spec.world_size} wrote no result"] if missing else []
        reasons += [f"rank {r}: {str(payloads[r].get('error') or payloads[r].get('status')).splitlines()[0]}"
                    for r in failed]
        first = payloads[failed[0]] if failed else {}
        status = "error" if missing else str(first.get("status", "error"))
        return ChildOutcome(status, payload={"env": _part(first, "env")}, error="; ".join(reasons),
                            tail=_lines(first, "traceback"))
    ranks = [_rank_raw(payloads[r]) for r in range(spec.world_size)]
    env = _part(payloads[0], "env")
    hosts = [str(_part(payloads[r], "env").get("node_hostname", "")) for r in range(spec.world_size)]
    if spec.world_size > 1 and any(hosts):
        env["rank_hosts"] = ",".join(hosts)
    payload: dict[str, object] = {"status": "ok", "ranks": ranks, "env": env, "extra": _part(payloads[0], "extra")}
    sums = [r.get("param_checksum") for r in ranks]
    values = [float(s) for s in sums if isinstance(s, (int, float))]
    if spec.world_size > 1 and len(values) < len(sums):
        nones = ", ".join(str(i) for i, s in enumerate(sums) if not isinstance(s, (int, float)))
        return ChildOutcome("failed_check", payload=payload, error=f"rank(s) {nones} reported no parameter "
                            f"checksum: the {spec.framework} backend does not keep ranks in sync")
    if values and not all(math.isclose(v, values[0], rel_tol=CHECKSUM_REL_TOL) for v in values):
        return ChildOutcome("failed_check", payload=payload,
                            error="parameters differ across ranks after the timed steps: checksums "
                                  + ", ".join(f"rank {i} {v:.12g}" for i, v in enumerate(values)))
    return ChildOutcome("ok", payload=payload)


def collect(spec: PointSpec, result: Path, failure: ChildOutcome | None,
            env: dict[str, str] | None = None) -> ChildOutcome:
    """Merge the rank files next to `result` (the file itself for one rank) with how the engine ended.

    A timeout or an out-of-memory kill wins. Otherwise the ranks' own records come first (a rank that wrote
    nothing, a rank's error such as a peer closing the connection), followed by the engine's reason. Ranks
    that all measured are kept even if the engine complained afterwards (noted in extra).
    """
    if spec.world_size == 1:
        found = {0: _read(result)}
    else:
        found = {r: _read(rank_result_path(result, r)) for r in range(spec.world_size)}
    payloads = {r: p for r, p in found.items() if p is not None}
    if failure is not None and failure.status in ("timeout", "oom"):
        out = failure
    else:
        out = merge(spec, payloads)
        if failure is not None and out.status == "ok":
            extra = _part(out.payload, "extra")
            extra["launcher_warning"] = failure.error
            out.payload["extra"] = extra
        elif failure is not None and not payloads:  # the engine's reason is the whole story
            out = ChildOutcome(failure.status, error=f"{failure.error}; no rank wrote a result", tail=failure.tail)
        elif failure is not None:  # a rank that wrote nothing ended as the engine says (crashed, error)
            status = failure.status if len(payloads) < spec.world_size else out.status
            out = ChildOutcome(status, payload=out.payload, error=f"{out.error}; {failure.error}",
                               tail=out.tail or failure.tail)
    if failure is not None:
        out.tail = out.tail or failure.tail
        out.wall_s = failure.wall_s
    if env:
        out.payload["env"] = {**_part(out.payload, "env"), **env}
    return out
