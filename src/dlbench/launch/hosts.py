"""Where ranks run: a list of hosts reached by a command you configure (ssh by default), as tf_cnn_benchmarks'
``--worker_hosts`` did; the ``hosts`` launcher (one plain worker per rank, started with the rank contract's
variables and no framework engine in between); and the registration of every multi-rank launcher.

Commands are argv lists. The reach command is the user's own template, split once with shlex and never given
to a shell here; only ssh, which joins its arguments for the remote shell, gets the remote argv quoted back
with ``shlex.join`` so that the remote side sees exactly that argv.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlbench.launch.ranks import (
    NODE_HOSTS_VAR,
    RDZV_TIMEOUT_VAR,
    collect,
    free_port,
    group_failure,
    job_files,
    run_group,
)
from dlbench.launch.worker_process import (
    ChildOutcome,
    ProgressSink,
    run_local,
    worker_env,
)
from dlbench.spec import PointSpec, SpecError

DEFAULT_REACH: tuple[str, ...] = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "{host}")
DEFAULT_RDZV_TIMEOUT_S = 300.0
# Variables a remote rank needs, passed explicitly where the reach command does not carry the environment.
FORWARD_PREFIXES: tuple[str, ...] = ("DLBENCH_", "GLOO_", "NCCL_", "TORCH_", "CUDA_", "OMP_", "MKL_",
                                     "OPENBLAS_", "MASTER_", "PYTHONUNBUFFERED", "TF_", "XLA_", "JAX_")
FORWARD_NAMES: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
REMOTE_SHELLS: tuple[str, ...] = ("ssh", "rsh")
# Multi-process on one machine through the framework's own engine; frameworks not named use `local`.
ENGINE_FOR: dict[str, str] = {"torch": "torchrun"}


def forwarded(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment that ranks on another host must receive."""
    return {k: v for k, v in env.items() if k in FORWARD_NAMES or k.startswith(FORWARD_PREFIXES)}


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
            raise SpecError("the reach command must contain {host}, e.g. 'ssh {host}' or "
                            "'nsenter --net=/run/netns/{host}'")
        if self.rendezvous_timeout_s <= 0:
            raise SpecError(f"the rendezvous timeout must be > 0 seconds; got {self.rendezvous_timeout_s}")

    @classmethod
    def from_options(cls, hosts: str | None = None, reach: str | None = None, master_addr: str | None = None,
                     rendezvous_timeout_s: float | None = None) -> HostsConfig:
        """From --hosts 'h1,h2', --reach 'ssh {host}' (split with shlex into an argv template) and the rest."""
        try:
            reach_argv = tuple(shlex.split(reach)) if reach else DEFAULT_REACH
        except ValueError as exc:
            raise SpecError(f"cannot split the reach command {reach!r}: {exc}") from None
        if not reach_argv:
            raise SpecError("the reach command is empty; give e.g. 'ssh {host}'")
        return cls(hosts=tuple(h.strip() for h in (hosts or "").split(",") if h.strip()), reach=reach_argv,
                   master_addr=master_addr or None,
                   rendezvous_timeout_s=rendezvous_timeout_s or DEFAULT_RDZV_TIMEOUT_S)

    @classmethod
    def from_env(cls) -> HostsConfig:
        """From $DLBENCH_HOSTS, $DLBENCH_REACH, $DLBENCH_MASTER_ADDR and $DLBENCH_RDZV_TIMEOUT."""
        timeout = os.environ.get(RDZV_TIMEOUT_VAR)
        try:
            seconds = float(timeout) if timeout else None
        except ValueError:
            raise SpecError(f"{RDZV_TIMEOUT_VAR} must be a number of seconds; got {timeout!r}") from None
        return cls.from_options(os.environ.get("DLBENCH_HOSTS"), os.environ.get("DLBENCH_REACH"),
                                os.environ.get("DLBENCH_MASTER_ADDR"), seconds)

    def master(self) -> str:
        """The rendezvous address: as configured, else the first host, else this machine."""
        return self.master_addr or (self.hosts[0] if self.hosts else "127.0.0.1")

    def problem(self, spec: PointSpec) -> str | None:
        """Why this configuration cannot place the spec's nodes, or None."""
        if spec.nodes > 1 and len(self.hosts) < spec.nodes:
            return (f"{spec.nodes} nodes need {spec.nodes} hosts, {len(self.hosts)} given: pass --hosts h1,h2 "
                    "(or set DLBENCH_HOSTS), or use --launcher slurm")
        return None

    def label(self, node: int) -> str:
        """'node 1 (h2)' for messages."""
        return f"node {node} ({self.hosts[node]})" if self.hosts else f"node {node} (this machine)"

    def command(self, node: int, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """argv run on the node's host: as is on this machine, else behind the reach command with env set."""
        if not self.hosts:
            return list(argv)
        prefix = [part.replace("{host}", self.hosts[node]) for part in self.reach]
        remote = ["env", *(f"{k}={v}" for k, v in sorted(forwarded(env).items())), *argv]
        if os.path.basename(prefix[0]) in REMOTE_SHELLS:
            return [*prefix, shlex.join(remote)]
        return [*prefix, *remote]


def rank_env(spec: PointSpec, config: HostsConfig, port: int) -> dict[str, str]:
    """The environment every rank shares: the worker's, the rendezvous address and its timeout, and the
    node hosts in node order (NODE_HOSTS_VAR; for frameworks that list every worker, such as TF_CONFIG)."""
    hosts = ",".join(config.hosts[:spec.nodes]) if config.hosts else config.master()
    return worker_env(spec, {"MASTER_ADDR": config.master(), "MASTER_PORT": str(port),
                             "WORLD_SIZE": str(spec.world_size), RDZV_TIMEOUT_VAR: f"{config.rendezvous_timeout_s:g}",
                             NODE_HOSTS_VAR: hosts})


def topology(spec: PointSpec, config: HostsConfig) -> dict[str, str]:
    """Launcher-side facts for the result's environment."""
    out = {"world_size": str(spec.world_size), "master_addr": config.master()}
    if config.hosts:
        out["hosts"] = ",".join(config.hosts[:spec.nodes])
    return out


def launch(spec: PointSpec, python: str, on_progress: ProgressSink | None, config: HostsConfig) -> ChildOutcome:
    """Start every rank as a plain worker on its host, with RANK, WORLD_SIZE, MASTER_ADDR ... set."""
    problem = config.problem(spec)
    if problem:
        return ChildOutcome("error", error=problem)
    with job_files(spec, shared=bool(config.hosts)) as job:
        spec_path, result = job.spec, job.result
        base = rank_env(spec, config, free_port())
        commands, envs, labels = [], [], []
        for node in range(spec.nodes):
            for local in range(spec.devices_per_node):
                rank = node * spec.devices_per_node + local
                env = {**base, "RANK": str(rank), "LOCAL_RANK": str(local), "NODE_RANK": str(node),
                       "LOCAL_WORLD_SIZE": str(spec.devices_per_node)}
                commands.append(config.command(node, [python, "-m", "dlbench.worker", str(spec_path), str(result)],
                                               env))
                envs.append(env)
                labels.append(f"rank {rank} on {config.label(node)}")
        group = run_group(commands, spec, envs, on_progress)
        return collect(spec, result, group_failure(spec, group, labels), env=topology(spec, config))


def local(spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
    """This machine: the single worker for one device, one plain worker per rank for several."""
    if spec.world_size == 1:
        return run_local(spec, python, on_progress)
    return launch(spec, python, on_progress, HostsConfig())


def default_launcher(spec: PointSpec) -> str:
    """`local` for one device; for several, the framework's own engine where dlbench drives one."""
    return ENGINE_FOR.get(spec.framework, "local") if spec.world_size > 1 else "local"


def register_launchers(config: HostsConfig | None = None) -> None:
    """Register local (multi-rank aware), hosts, torchrun, mpirun and slurm with this host configuration."""
    from dlbench.launch import mpirun, slurm, torchrun
    from dlbench.launch.point import register_launcher

    cfg = config if config is not None else HostsConfig.from_env()
    register_launcher("local", local)
    register_launcher("hosts", functools.partial(launch, config=cfg))
    register_launcher("torchrun", functools.partial(torchrun.launch, config=cfg))
    register_launcher("mpirun", functools.partial(mpirun.launch, config=cfg))
    register_launcher("slurm", functools.partial(slurm.launch, config=cfg))

