"""The mpirun launcher: Open MPI starts the ranks (with a hostfile when hosts are configured).

Each rank finds OMPI_COMM_WORLD_RANK ..., which the worker translates to RANK ...; MASTER_ADDR/MASTER_PORT
are exported with ``-x`` for frameworks that meet over TCP (torch's gloo/NCCL). Remote hosts are started by
Open MPI's own agent (ssh by default), not by the reach command. Imports no framework.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from dlbench.launch.folder import free_port, point_folder
from dlbench.launch.hosts import HostsConfig, forwarded, rank_env, topology
from dlbench.launch.merge import collect
from dlbench.launch.outcome import ChildOutcome, group_failure
from dlbench.launch.process import ProgressSink, run_group
from dlbench.spec import PointSpec


def mpi_flavour() -> str | None:
    """'openmpi' when the mpirun on PATH is Open MPI, another word for other MPIs, None when absent."""
    exe = shutil.which("mpirun")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return "openmpi" if "Open MPI" in out.stdout + out.stderr else "other"


def mpirun_argv(
    spec: PointSpec, python: str, env: dict[str, str], hostfile: Path | None, spec_path: str, result_path: str
) -> list[str]:
    """The mpirun command: world-size ranks, K per node, the rank environment exported with -x."""
    argv = ["mpirun", "-np", str(spec.world_size), "--bind-to", "none", "--oversubscribe"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    if hostfile is not None:
        argv += ["--hostfile", str(hostfile), "--map-by", f"ppr:{spec.devices_per_node}:node"]
    for name in sorted(forwarded(env)):
        argv += ["-x", name]
    return [*argv, python, "-m", "dlbench.worker", spec_path, result_path]


def launch(spec: PointSpec, python: str, on_progress: ProgressSink | None, config: HostsConfig) -> ChildOutcome:
    """Run the point's ranks under mpirun and merge every rank's result."""
    flavour = mpi_flavour()
    if flavour is None:
        return ChildOutcome("error", error="mpirun is not on PATH: install Open MPI (apt-get install openmpi-bin)")
    if flavour != "openmpi":
        return ChildOutcome("error", error="the mpirun on PATH is not Open MPI; dlbench drives Open MPI's mpirun")
    problem = config.problem(spec)
    if problem:
        return ChildOutcome("error", error=problem)
    with point_folder(spec, shared=bool(config.hosts)) as folder:
        spec_path, result = folder.spec, folder.result
        hostfile = None
        if config.hosts:
            hostfile = folder.path / "hostfile"
            hostfile.write_text("".join(f"{h} slots={spec.devices_per_node}\n" for h in config.hosts[: spec.nodes]))
        env = rank_env(spec, config, free_port("" if config.hosts else "127.0.0.1"))
        argv = mpirun_argv(spec, python, env, hostfile, str(spec_path), str(result))
        group = run_group([argv], spec, env, on_progress)
        return collect(spec, result, group_failure(spec, group, ["mpirun"]), env=topology(spec, config))
