"""Where ranks run: a list of hosts reached by a command you configure (ssh by default), as tf_cnn_benchmarks'
``--worker_hosts`` did; the ``hosts`` launcher (one plain worker per rank, started with the rank contract's
variables and no framework engine in between); and ``local``.

Commands are argv lists. The reach command is the user's own template, split once with shlex and never given
to a shell here. What a remote rank must know from this machine's environment travels in a file (mode 0600) in
the point's folder, which every host sees, never on a command line: nothing the user or the environment holds
can reach a remote shell unquoted, and no secret shows in /proc/PID/cmdline. Only an allowlist of the
frameworks' own variables is forwarded. Where the reach command goes through ssh or rsh, which join their
arguments for the remote shell, the remote argv is quoted back with ``shlex.join``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlbench.launch.folder import PointFolder, free_port, point_folder
from dlbench.launch.merge import collect
from dlbench.launch.outcome import ChildOutcome, PointInterrupted, group_failure
from dlbench.launch.process import CONTROLLER_ONLY_VARS, ProgressSink, run_group, worker_env
from dlbench.spec import PointSpec, SpecError
from dlbench.wire import DEFAULT_RDZV_TIMEOUT_S, NODE_HOSTS_VAR, RANK_VARS, RDZV_TIMEOUT_VAR, SERVER_VAR, THREAD_VARS

DEFAULT_REACH: tuple[str, ...] = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "{host}")
# The frameworks' own variables a remote rank receives: exact names, and prefixes each framework owns.
FORWARD_NAMES: tuple[str, ...] = (
    *RANK_VARS,
    *THREAD_VARS,
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTHONUNBUFFERED",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
)
FORWARD_PREFIXES: tuple[str, ...] = (
    "DLBENCH_",
    "GLOO_",
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "JAX_",
    "FLAGS_",
    "PADDLE_",
    "MXNET_",
    "KMP_",
)
REMOTE_SHELLS: tuple[str, ...] = ("ssh", "rsh")
ENV_FILE_ARG = "--env-file"


def forwarded(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment that ranks on another host receive: the frameworks' own variables only, never
    the store or its credentials (the controller alone stores)."""
    return {
        k: v
        for k, v in env.items()
        if (k in FORWARD_NAMES or k.startswith(FORWARD_PREFIXES)) and k not in CONTROLLER_ONLY_VARS
    }


def env_file(folder: PointFolder, label: str, env: Mapping[str, str]) -> Path:
    """Write the forwarded part of env to a 0600 file in the point's folder, for one remote command."""
    path = folder.path / f"env-{label}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(forwarded(env), fh)
    return path


@dataclass(frozen=True)
class HostsConfig:
    """The hosts ranks may run on, how to reach one, the rendezvous address and how long to wait for it."""

    hosts: tuple[str, ...] = ()
    reach: tuple[str, ...] = DEFAULT_REACH
    master_addr: str | None = None
    rendezvous_timeout_s: float = DEFAULT_RDZV_TIMEOUT_S

    def __post_init__(self) -> None:
        for h in self.hosts:
            if not h or any(c.isspace() for c in h) or h.startswith("-"):
                raise SpecError(f"a host name must be a non-empty word not starting with '-'; got {h!r}")
        if self.hosts and not any("{host}" in part for part in self.reach):
            raise SpecError(
                "the reach command must contain {host}, e.g. 'ssh {host}' or 'nsenter --net=/run/netns/{host}'"
            )
        if not (0 < self.rendezvous_timeout_s < float("inf")):
            raise SpecError(
                f"the rendezvous timeout must be a finite number of seconds > 0; got {self.rendezvous_timeout_s}"
            )

    @classmethod
    def from_options(
        cls,
        hosts: str | None = None,
        reach: str | None = None,
        master_addr: str | None = None,
        rendezvous_timeout_s: float | None = None,
    ) -> HostsConfig:
        """From --hosts 'h1,h2', --reach 'ssh {host}' (split with shlex into an argv template) and the rest."""
        try:
            reach_argv = tuple(shlex.split(reach)) if reach else DEFAULT_REACH
        except ValueError as exc:
            raise SpecError(f"cannot split the reach command {reach!r}: {exc}") from None
        if not reach_argv:
            raise SpecError("the reach command is empty; give e.g. 'ssh {host}'")
        return cls(
            hosts=tuple(h.strip() for h in (hosts or "").split(",") if h.strip()),
            reach=reach_argv,
            master_addr=master_addr or None,
            rendezvous_timeout_s=DEFAULT_RDZV_TIMEOUT_S if rendezvous_timeout_s is None else rendezvous_timeout_s,
        )

    @classmethod
    def from_env(cls) -> HostsConfig:
        """From $DLBENCH_HOSTS, $DLBENCH_REACH, $DLBENCH_MASTER_ADDR and $DLBENCH_RDZV_TIMEOUT."""
        timeout = os.environ.get(RDZV_TIMEOUT_VAR)
        try:
            seconds = float(timeout) if timeout else None
        except ValueError:
            raise SpecError(f"{RDZV_TIMEOUT_VAR} must be a number of seconds; got {timeout!r}") from None
        return cls.from_options(
            os.environ.get("DLBENCH_HOSTS"),
            os.environ.get("DLBENCH_REACH"),
            os.environ.get("DLBENCH_MASTER_ADDR"),
            seconds,
        )

    def master(self) -> str:
        """The rendezvous address: as configured, else the first host, else this machine's loopback."""
        return self.master_addr or (self.hosts[0] if self.hosts else "127.0.0.1")

    def problem(self, spec: PointSpec) -> str | None:
        """Why this configuration cannot place the spec's nodes, or None."""
        if spec.nodes > 1 and len(self.hosts) < spec.nodes:
            return (
                f"{spec.nodes} nodes need {spec.nodes} hosts, {len(self.hosts)} given: pass --hosts h1,h2 "
                "(or set DLBENCH_HOSTS), or use --launcher slurm"
            )
        return None

    def label(self, node: int) -> str:
        """'node 1 (h2)' for messages."""
        return f"node {node} ({self.hosts[node]})" if self.hosts else f"node {node} (this machine)"

    def command(self, node: int, argv: Sequence[str], env_path: Path | None = None) -> list[str]:
        """argv run on the node's host: as is on this machine, else behind the reach command. A dlbench command
        run remotely reads its environment from env_path (``--env-file``), placed before its own arguments."""
        if not self.hosts:
            return list(argv)
        prefix = [part.replace("{host}", self.hosts[node]) for part in self.reach]
        remote = list(argv)
        if env_path is not None:
            remote = [remote[0], "-m", "dlbench.envfile", str(env_path), *remote]
        if any(os.path.basename(part) in REMOTE_SHELLS for part in prefix):
            return [*prefix, shlex.join(remote)]
        return [*prefix, *remote]


def rank_env(spec: PointSpec, config: HostsConfig, port: int) -> dict[str, str]:
    """The environment every rank shares: the worker's, the rendezvous address and its timeout, and the
    node hosts in node order (NODE_HOSTS_VAR; for frameworks that list every worker, such as TF_CONFIG)."""
    hosts = ",".join(config.hosts[: spec.nodes]) if config.hosts else config.master()
    return worker_env(
        spec,
        {
            "MASTER_ADDR": config.master(),
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(spec.world_size),
            RDZV_TIMEOUT_VAR: f"{config.rendezvous_timeout_s:g}",
            NODE_HOSTS_VAR: hosts,
        },
    )


def topology(spec: PointSpec, config: HostsConfig) -> dict[str, str]:
    """Launcher-side facts for the result's environment."""
    out = {"world_size": str(spec.world_size), "master_addr": config.master()}
    if config.hosts:
        out["hosts"] = ",".join(config.hosts[: spec.nodes])
    return out


def worker_argv(python: str, folder: PointFolder) -> list[str]:
    """The worker command for a point's folder."""
    return [python, "-m", "dlbench.worker", str(folder.spec), str(folder.result)]


def launch(spec: PointSpec, python: str, on_progress: ProgressSink | None, config: HostsConfig) -> ChildOutcome:
    """Start every rank as a plain worker on its host, with RANK, WORLD_SIZE, MASTER_ADDR ... set."""
    problem = config.problem(spec)
    if problem:
        return ChildOutcome("error", error=problem)
    with point_folder(spec, shared=bool(config.hosts)) as folder:
        base = rank_env(spec, config, free_port("" if config.hosts else "127.0.0.1"))
        commands, envs, labels = [], [], []
        ranks = (
            [(0, 0)]
            if spec.processes == 1
            else [(n, k) for n in range(spec.nodes) for k in range(spec.devices_per_node)]
        )
        for node, local in ranks:  # one per device; one coordinator when servers compute (TF's ps)
            rank = node * spec.devices_per_node + local
            env = {
                **base,
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
                "NODE_RANK": str(node),
                "LOCAL_WORLD_SIZE": str(spec.devices_per_node),
            }
            path = env_file(folder, f"rank{rank}", env) if config.hosts else None
            commands.append(config.command(node, worker_argv(python, folder), path))
            envs.append(env)
            labels.append(f"rank {rank} on {config.label(node)}")
        for index in range(spec.servers):  # servers (MXNet's dist_sync, TF's ps), on node 0, beside the ranks
            env = {**base, SERVER_VAR: str(index)}
            path = env_file(folder, f"server{index}", env) if config.hosts else None
            commands.append(config.command(0, worker_argv(python, folder), path))
            envs.append(env)
            labels.append(f"server {index} on {config.label(0)}")
        group = run_group(commands, spec, envs, on_progress)
        return collect(spec, folder.result, group_failure(spec, group, labels), env=topology(spec, config))


def run_single(
    spec: PointSpec, python: str, on_progress: ProgressSink | None, env_extra: dict[str, str] | None = None
) -> ChildOutcome:
    """One worker process on this machine: a group of one. A convergence run stopped by Ctrl-C gets the signal
    itself and leaves its curve so far, raised up as a PointInterrupted (launch/session.py keeps it)."""
    with point_folder(spec, shared=False) as folder:
        argv, env = [worker_argv(python, folder)], worker_env(spec, env_extra)
        try:
            group = run_group(argv, spec, env, on_progress, stop_gently=spec.converge)
        except KeyboardInterrupt:
            left = collect(spec, folder.result, None) if spec.converge else None
            if left is None or left.result is None:  # nothing written: stop as for any Ctrl-C
                raise
            raise PointInterrupted(left) from None
        return collect(spec, folder.result, group_failure(spec, group, ["worker"]))


def local(spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
    """This machine: the single worker for one process, one plain worker per rank for several (and the servers
    beside them, where the strategy has some)."""
    if spec.processes == 1 and not spec.servers:
        return run_single(spec, python, on_progress)
    return launch(spec, python, on_progress, HostsConfig())
