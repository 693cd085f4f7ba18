"""The torchrun launcher: torch's own engine (``python -m torch.distributed.run``), one per node.

One node runs here (or on the first configured host); several nodes each get a torchrun started through
the hosts configuration's reach command, meeting at a static rendezvous on the master address. torchrun sets
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for each worker. Imports no framework.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from dlbench.launch.folder import free_port, point_folder
from dlbench.launch.hosts import HostsConfig, env_file, rank_env, topology
from dlbench.launch.merge import collect
from dlbench.launch.outcome import ChildOutcome, group_failure
from dlbench.launch.process import ProgressSink, run_group
from dlbench.spec import PointSpec


def torchrun_argv(
    spec: PointSpec,
    python: str,
    node: int,
    addr: str,
    port: int,
    rdzv_timeout_s: float,
    spec_path: str,
    result_path: str,
) -> list[str]:
    """The torchrun command for one node: static rendezvous, no restarts, the worker as a module."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.nodes}",
        f"--node-rank={node}",
        f"--nproc-per-node={spec.devices_per_node}",
        f"--master-addr={addr}",
        f"--master-port={port}",
        f"--rdzv-conf=timeout={max(1, round(rdzv_timeout_s))}",
        "--max-restarts=0",
        "-m",
        "dlbench.worker",
        spec_path,
        result_path,
    ]


_SUMMARY = re.compile(r"^\s*rank\s*:\s*(\d+).*?^\s*exitcode\s*:\s*(-?\d+)", re.MULTILINE | re.DOTALL)


def failed_rank(tail: Sequence[str]) -> tuple[int, int] | None:
    """(rank, exit code) of the root cause in torchrun's failure summary ('rank : 1', 'exitcode : -9'), if any.

    The summary lists every failed rank (those torchrun stopped with SIGTERM too) and then, last, the
    "Root Cause (first observed failure)".
    """
    text = "\n".join(tail)
    m = _SUMMARY.search(text[text.rfind("Root Cause") :] if "Root Cause" in text else text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _explain(failure: ChildOutcome | None, tails: Sequence[Sequence[str]], labels: Sequence[str]) -> None:
    """Name the rank torchrun reports as failed, rather than torchrun's own exit code."""
    if failure is None or failure.status in ("timeout", "oom"):
        return
    for tail, label in zip(tails, labels):
        found = failed_rank(tail)
        if found is None:
            continue
        rank, code = found
        if code < 0 and -code in signal.valid_signals():
            failure.status, how = "crashed", f"died from {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        failure.error = f"rank {rank} {how}; {label} stopped the others"
        return


def launch(spec: PointSpec, python: str, on_progress: ProgressSink | None, config: HostsConfig) -> ChildOutcome:
    """Run the point's ranks under torchrun on its node(s) and merge every rank's result."""
    problem = config.problem(spec)
    if problem:
        return ChildOutcome("error", error=problem)
    with point_folder(spec, shared=bool(config.hosts)) as folder:
        spec_path, result = folder.spec, folder.result
        port = free_port("" if config.hosts else "127.0.0.1")
        env = rank_env(spec, config, port)
        commands = [
            config.command(
                node,
                torchrun_argv(
                    spec, python, node, config.master(), port, config.rendezvous_timeout_s, str(spec_path), str(result)
                ),
                env_file(folder, f"node{node}", env) if config.hosts else None,
            )
            for node in range(spec.nodes)
        ]
        labels = [f"torchrun on {config.label(node)}" for node in range(spec.nodes)]
        group = run_group(commands, spec, env, on_progress)
        failure = group_failure(spec, group, labels)
        _explain(failure, group.tails, labels)
        return collect(spec, result, failure, env=topology(spec, config))
