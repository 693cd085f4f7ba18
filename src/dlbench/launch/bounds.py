"""How many ranks and threads a point may ask for before anything starts: a typo must not be a fork bomb
(`--scale 1n100000c` started 100,000 workers; `--threads 100000` asked torch for 100,000 threads).

On this machine a node's ranks are at most what it can run side by side: its visible GPUs for a CUDA point
(NVML; where it sees none the point fails by itself and the fixed cap below applies), its logical CPUs for a
CPU point. Ranks on other machines (Slurm, --hosts) cannot be counted from here: they get a fixed cap per node,
REMOTE_RANKS_PER_NODE, above any accelerator server sold (8-16 GPUs) and above the cores a CPU rank usually
gets. Threads are at most this machine's logical CPUs (REMOTE_THREADS on other machines). `--force` goes past
every bound, for the machine dlbench cannot see.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from dlbench.spec import PointSpec, SpecError

REMOTE_RANKS_PER_NODE = 256
REMOTE_THREADS = 1024


def logical_cpus() -> int:
    """Logical CPUs of this machine (1 where the OS cannot tell)."""
    return os.cpu_count() or 1


def local_rank_limit(device: str) -> tuple[int, str]:
    """(most ranks one node of this machine can run, why) for a device."""
    if device == "cuda":
        from dlbench.machine.env import gpus

        visible = len(gpus().devices)
        if visible:
            return visible, f"this machine has {visible} visible GPU(s)"
        return REMOTE_RANKS_PER_NODE, "NVML sees no GPU here, so the fixed cap"
    n = logical_cpus()
    return n, f"this machine has {n} logical CPUs"


def bound_problem(spec: PointSpec, remote: bool) -> str | None:
    """Why the spec asks for more ranks or threads than its node can start (None when within bounds)."""
    per_node = spec.processes if spec.nodes == 1 else spec.devices_per_node
    limit, why = (
        (REMOTE_RANKS_PER_NODE, "the fixed cap for a node dlbench cannot see")
        if remote
        else local_rank_limit(spec.device)
    )
    if per_node > limit:
        return (
            f"{spec.scale} starts {per_node:,} ranks on a node, more than {limit:,} ({why}): check the scale, "
            "or pass --force to start them anyway"
        )
    threads_limit = REMOTE_THREADS if remote else logical_cpus()
    if spec.threads is not None and spec.threads > threads_limit:
        return (
            f"--threads {spec.threads:,} is more than the {threads_limit:,} logical CPUs "
            f"{'a node may have here' if remote else 'of this machine'}: pass --force to ask for them anyway"
        )
    return None


def gpu_sharing_problem(spec: PointSpec, remote: bool) -> str | None:
    """Why ranks of a CUDA point started on this machine would share a GPU (more ranks than the GPUs NVML shows
    this process: every rank started here gets the same CUDA_VISIBLE_DEVICES), or None. NCCL refuses two ranks on
    one GPU ("Duplicate GPU detected"), so --force cannot help."""
    if remote or spec.device != "cuda" or spec.processes <= 1:
        return None
    from dlbench.machine.env import gpus

    visible, per_node = len(gpus().devices), spec.processes if spec.nodes == 1 else spec.devices_per_node
    if not visible or per_node <= visible:
        return None
    return (
        f"{per_node} ranks of a CUDA point on this machine, which shows {visible} GPU(s) (CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): ranks would share a GPU, which NCCL refuses; use "
        f"--scale 1n{visible}g or fewer ranks"
    )


def check_bounds(specs: Iterable[PointSpec], force: bool, remote_hosts: bool = False) -> None:
    """SpecError for the first spec out of bounds, unless forced (ranks sharing a GPU here: even forced).
    remote_hosts: --hosts (or DLBENCH_HOSTS) is set, so ranks may run on machines dlbench cannot see (as under
    Slurm)."""
    specs = list(specs)
    for spec in specs:
        problem = gpu_sharing_problem(spec, remote=remote_hosts or spec.launcher == "slurm")
        if problem:
            raise SpecError(problem)
    if force:
        return
    for spec in specs:
        problem = bound_problem(spec, remote=remote_hosts or spec.launcher == "slurm")
        if problem:
            raise SpecError(problem)


__all__ = [
    "REMOTE_RANKS_PER_NODE",
    "REMOTE_THREADS",
    "bound_problem",
    "check_bounds",
    "gpu_sharing_problem",
    "local_rank_limit",
    "logical_cpus",
]
