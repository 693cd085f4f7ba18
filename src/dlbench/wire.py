"""The contract between the controller and a worker, in one place. Light: no framework, no launcher.

A launcher starts ``<python> -m dlbench.worker SPEC.json RESULT.json`` with the rank variables below in the
environment; the worker reports progress as lines on stdout starting with PROGRESS_PREFIX and writes one
`WorkerResult` (to ``rank_result_path(RESULT, rank)`` when the point has several ranks). The controller checks
the result's version and shape on read.

Rank variables: whichever engine started it (torchrun, srun, mpirun, the hosts launcher), a worker finds RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, or the engine's own names, which `configure_rank`
translates; DLBENCH_RDZV_TIMEOUT bounds a backend's rendezvous (seconds); DLBENCH_NODE_HOSTS lists the node
hosts, node 0 first (rank r runs on node r // devices_per_node), for frameworks that name every worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlbench.records import RankRaw, Status
from dlbench.spec import PointSpec

PROGRESS_PREFIX = "@@dlbench "
RESULT_VERSION = 2  # 2: typed WorkerResult, `facts` (was `extra`), window timing in the rank records

RDZV_TIMEOUT_VAR = "DLBENCH_RDZV_TIMEOUT"
SERVER_VAR = "DLBENCH_SERVER"  # set (0, 1 ...) on a parameter-server process a launcher starts beside the ranks
NODE_HOSTS_VAR = "DLBENCH_NODE_HOSTS"
RANK_GPU = "rank_gpu"  # environment key: NVML's name of the GPU a worker's rank ran on, as the worker saw it
RANK_VARS: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
THREAD_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# glibc's allocator policy, the same for every framework's worker: without it, a training loop that frees and
# re-allocates large activations each step pays page faults and madvise calls that a long-lived process would
# not (see benchmarks/fairness.py). Read by glibc at process start, so set in the worker's environment.
ALLOCATOR_VARS: dict[str, str] = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30)}
# The engines' names for (RANK, WORLD_SIZE, LOCAL_RANK), in the order they are tried.
ENGINE_VARS: tuple[tuple[str, str, str], ...] = (
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)
DEFAULT_RDZV_TIMEOUT_S = 300.0
# telemetry: the controller that watches its workers from outside (GPU memory, clocks, energy, CPU contention)
# names itself here as "<pid>:<start time>"; a worker whose ancestors include that process leaves the watching
# to it, any other worker (a rank on another host) samples its own device memory.
WATCHER_VAR = "DLBENCH_WATCHER"
CONTROLLER_MEMORY = "nvml (controller)"  # a rank's memory_kind until the controller fills in what it sampled
EDGE_KEY = "edge"  # a progress event at a measured repeat's first ("start") or last ("end") clock read


@dataclass(frozen=True)
class RankContext:
    """Where this worker sits among the point's ranks, read once from the environment by the worker."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    rdzv_timeout_s: float = DEFAULT_RDZV_TIMEOUT_S
    node_hosts: tuple[str, ...] = ()
    server: int = -1  # this process's index among the point's parameter servers (spec.servers); -1: a rank

    def device_index(self, visible: int) -> int:
        """The ordinal, among the devices this process sees, of this rank's device: its local rank modulo the
        visible devices. With one GPU bound per task (Slurm's --gpus-per-task, or CUDA_VISIBLE_DEVICES set per
        rank) every rank sees one device and takes ordinal 0; with a node's GPUs all visible, rank i takes GPU i."""
        return self.local_rank % visible if visible > 0 else 0


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(environ.get(name, default))
    except ValueError:
        return default


def configure_rank(spec: PointSpec, environ: MutableMapping[str, str]) -> RankContext:
    """Worker side, before any framework import: fill RANK/WORLD_SIZE/LOCAL_RANK from the engine's variables,
    split the node's cores between its ranks (unless the spec fixes the thread count), and read the context."""
    if spec.processes > 1 and "RANK" not in environ:
        for rank_var, size_var, local_var in ENGINE_VARS:
            if rank_var in environ:
                environ["RANK"] = environ[rank_var]
                environ.setdefault("WORLD_SIZE", environ.get(size_var, str(spec.world_size)))
                environ.setdefault("LOCAL_RANK", environ.get(local_var, "0"))
                break
    if spec.processes == 1 and not spec.servers:  # a coordinator with servers reads the rendezvous address below
        return RankContext(rdzv_timeout_s=_timeout(environ, spec))
    environ.setdefault("LOCAL_RANK", "0")
    environ.setdefault("WORLD_SIZE", str(spec.world_size))
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    threads = spec.threads or max(1, cores // spec.devices_per_node)
    for var in THREAD_VARS:
        environ[var] = str(threads)
    rank = _int(environ, "RANK", 0)
    hosts = tuple(h for h in environ.get(NODE_HOSTS_VAR, "").split(",") if h)
    return RankContext(
        rank=rank,
        world_size=_int(environ, "WORLD_SIZE", spec.world_size),
        local_rank=_int(environ, "LOCAL_RANK", 0),
        local_world_size=_int(environ, "LOCAL_WORLD_SIZE", spec.devices_per_node),
        node_rank=_int(environ, "NODE_RANK", rank // spec.devices_per_node),
        master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(environ, "MASTER_PORT", 0),
        rdzv_timeout_s=_timeout(environ, spec),
        node_hosts=hosts,
        server=_int(environ, SERVER_VAR, -1),
    )


def _timeout(environ: Mapping[str, str], spec: PointSpec) -> float:
    """The rendezvous timeout: $DLBENCH_RDZV_TIMEOUT, else the point's own timeout."""
    try:
        value = float(environ.get(RDZV_TIMEOUT_VAR) or spec.timeout_s)
    except ValueError:
        return spec.timeout_s
    return value if value > 0 else spec.timeout_s


def rank_result_path(result: Path, rank: int) -> Path:
    """Where rank `rank` writes its result when a point has several ranks."""
    return result.with_name(f"{result.stem}.rank{rank}{result.suffix}")


def progress_line(event: Mapping[str, object]) -> str:
    """A progress event as the line a worker prints."""
    return PROGRESS_PREFIX + json.dumps(dict(event))


def edge_event(edge: str, repeat: int, total: int) -> dict[str, object]:
    """The progress event a worker prints just before a repeat's first clock read ("start", step 0) or just after
    its last ("end", step = total): the measured windows' bounds, read by the controller's telemetry."""
    return {
        "phase": "measure",
        "repeat": repeat,
        "step": 0 if edge == "start" else total,
        "total": total,
        EDGE_KEY: edge,
    }


def watcher_token(pid: int) -> str:
    """WATCHER_VAR's value for a process: its pid and start time (a pid alone may be reused)."""
    return f"{pid}:{psutil.Process(pid).create_time():.3f}"


def watched_by_controller(environ: Mapping[str, str]) -> bool:
    """Worker side: whether the controller named in WATCHER_VAR is one of this process's ancestors (then it sees
    this worker and samples it from outside); False on another host or in another PID namespace."""
    token = environ.get(WATCHER_VAR, "")
    try:
        return any(watcher_token(p.pid) == token for p in psutil.Process().parents())
    except psutil.Error:
        return False


def parse_progress(line: str) -> dict[str, object] | None:
    """The event of a progress line, or None for any other output line (a malformed event included)."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        event = json.loads(line[len(PROGRESS_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


class WorkerResult(BaseModel):
    """What one worker process reports: its status, the raw records of its rank, the environment only the
    framework knows (identity and descriptive keys mixed; the controller splits them) and backend facts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    result_version: int = RESULT_VERSION
    status: Status
    error: str | None = None
    traceback: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    facts: dict[str, object] = Field(default_factory=dict)
    ranks: list[RankRaw] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        """Write atomically (temporary file, then rename), so that a reader never sees half a result."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json())
        os.replace(tmp, path)


class ResultError(ValueError):
    """A worker result file that this controller cannot read: absent, malformed, or another version."""


def read_result(path: Path) -> WorkerResult:
    """The worker result at path, checked; ResultError with a one-line reason otherwise."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultError(f"cannot read the worker result {path.name}: {exc.strerror or exc}") from None
    try:
        version = json.loads(text).get("result_version")
    except (json.JSONDecodeError, AttributeError):
        raise ResultError(f"the worker result {path.name} is not a JSON object") from None
    if version != RESULT_VERSION:
        raise ResultError(
            f"the worker result {path.name} has version {version!r}, this controller reads "
            f"{RESULT_VERSION}: the framework's environment runs another dlbench (dlbench setup FW)"
        )
    try:
        return WorkerResult.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ResultError(f"the worker result {path.name} is malformed at {where}: {first.get('msg')}") from None


__all__ = [
    "ALLOCATOR_VARS",
    "CONTROLLER_MEMORY",
    "DEFAULT_RDZV_TIMEOUT_S",
    "EDGE_KEY",
    "ENGINE_VARS",
    "NODE_HOSTS_VAR",
    "PROGRESS_PREFIX",
    "RANK_GPU",
    "RANK_VARS",
    "RDZV_TIMEOUT_VAR",
    "RESULT_VERSION",
    "SERVER_VAR",
    "THREAD_VARS",
    "WATCHER_VAR",
    "RankContext",
    "ResultError",
    "WorkerResult",
    "configure_rank",
    "edge_event",
    "parse_progress",
    "progress_line",
    "rank_result_path",
    "read_result",
    "watched_by_controller",
    "watcher_token",
]
