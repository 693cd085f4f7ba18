"""The slurm launcher: a point becomes a batch job (sbatch, with srun inside) across N nodes.

It submits with ``sbatch --parsable``, polls ``squeue`` (``sbatch --wait`` backs off up to 32 s), stops the job
with ``scancel`` when it queues or runs too long, reads the final state with ``scontrol``, and collects every
rank's result from a folder the nodes share ($DLBENCH_JOB_DIR, default ./dlbench-results/jobs). The batch
script is a constant: the worker command reaches srun as the script's arguments ("$@"), so no shell ever
parses dlbench's or the user's input. Partition, account and the like come from sbatch's own SBATCH_*
variables or $DLBENCH_SBATCH_ARGS (split with shlex into argv). Imports no framework.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from dlbench.launch.folder import point_folder
from dlbench.launch.hosts import HostsConfig, rank_env, worker_argv
from dlbench.launch.merge import collect
from dlbench.launch.outcome import ChildOutcome
from dlbench.launch.process import OutputReader, ProgressSink
from dlbench.spec import PointSpec
from dlbench.wire import NODE_HOSTS_VAR, THREAD_VARS

BATCH_SCRIPT = """#!/bin/sh
# dlbench: one benchmark point as a Slurm job. The worker command arrives as this script's arguments and goes
# to srun untouched. The rendezvous is the first node of the allocation, on a port derived from the job id.
MASTER_ADDR=${DLBENCH_SLURM_MASTER_ADDR:-$(hostname)}
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
# Each node's address as Slurm reaches it (NodeAddr; the node name where it has none), node 0 first.
DLBENCH_NODE_HOSTS=$(for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  a=$(scontrol show node -o "$n" | awk '{for (i = 1; i <= NF; i++) if (index($i, "NodeAddr=") == 1) print substr($i, 10)}')
  echo "${a:-$n}"; done | paste -sd, -)
export MASTER_ADDR MASTER_PORT DLBENCH_NODE_HOSTS
exec srun --kill-on-bad-exit=1 "$@"
"""
QUEUE_TIMEOUT_VAR = "DLBENCH_SLURM_QUEUE_TIMEOUT"
EXTRA_ARGS_VAR = "DLBENCH_SBATCH_ARGS"
CALL_TIMEOUT_S = 60.0  # any single sbatch / squeue / scontrol / scancel call
POLL_S = 1.0
DONE_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
# Pending reasons under which a job will not start as submitted (sbatch accepts it and it would wait forever).
HOPELESS = {
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "PartitionConfig",
    "PartitionDown",
    "BadConstraints",
    "AccountNotAllowed",
    "InvalidAccount",
    "InvalidQOS",
    "QOSMaxNodePerJobLimit",
    "QOSMaxWallDurationPerJobLimit",
    "QOSMaxCpuPerJobLimit",
    "QOSMaxGRESPerJob",
}


def _call(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One Slurm client call with a bounded wait; a hung controller becomes a non-zero return code."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer within {CALL_TIMEOUT_S:g} s")
    except OSError as exc:
        return subprocess.CompletedProcess(argv, 127, "", f"cannot run {argv[0]}: {exc.strerror or exc}")


def sbatch_argv(spec: PointSpec, script: Path, folder: Path, worker: list[str], extra: list[str]) -> list[str]:
    """The sbatch command: N nodes, K tasks per node, a time limit from the point's timeout."""
    minutes = max(1, math.ceil(spec.timeout_s / 60))
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=dlbench-{spec.model}",
        f"--nodes={spec.nodes}",
        f"--ntasks-per-node={spec.devices_per_node}",
        f"--time={minutes}",
        f"--output={folder / 'job.out'}",
        f"--chdir={folder}",
        "--export=ALL",
    ]
    if spec.device == "cuda":
        argv.append(f"--gpus-per-node={spec.devices_per_node}")
    return [*argv, *extra, str(script), *worker]


def job_state(job: str) -> tuple[str, str, dict[str, str]]:
    """(state, exit code, other fields) from `scontrol show job`; ('UNKNOWN', '', {}) once Slurm forgot it."""
    out = _call(["scontrol", "show", "job", "-o", job])
    if out.returncode != 0:
        return "UNKNOWN", "", {}
    fields = {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", out.stdout)}
    return fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", ""), fields


def _squeue_state(job: str) -> tuple[str, str] | None:
    """(state, pending reason) while Slurm lists the job, ('', '') once it left, None when squeue did not answer."""
    out = _call(["squeue", "-h", "-j", job, "-o", "%T %r"])
    if out.returncode != 0:
        return ("", "") if "Invalid job id" in out.stderr else None
    if not out.stdout.strip():
        return "", ""
    state, _, reason = out.stdout.strip().splitlines()[-1].partition(" ")
    return state, reason.strip()


class _OutputFollower:
    """Reads the job's output file as it grows, through the same reader as a child's pipe."""

    def __init__(self, path: Path, sink: ProgressSink | None) -> None:
        self.path = path
        self.offset = 0
        self.reader = OutputReader(sink)

    @property
    def tail(self) -> list[str]:
        """The last non-progress lines."""
        return list(self.reader.tail)

    def poll(self) -> None:
        """Consume what was appended since the last call."""
        try:
            with self.path.open() as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except OSError:
            return
        self.reader.feed(text)


def wait_for(job: str, spec: PointSpec, queue_timeout_s: float, follow: Callable[[], None]) -> str | None:
    """Poll until the job leaves the queue; after a scancel returns why: 'timeout', 'queue_timeout', 'lost' or
    'hopeless:REASON' (a pending reason under which the job cannot start); None when it ended by itself."""
    submitted = time.monotonic()
    started: float | None = None
    unanswered = 0
    while True:
        follow()
        answer = _squeue_state(job)
        now = time.monotonic()
        if answer is None:
            unanswered += 1
            if unanswered * POLL_S > CALL_TIMEOUT_S * 3:
                _call(["scancel", job])
                return "lost"
            time.sleep(POLL_S)
            continue
        state, reason = answer
        if state == "" or state in DONE_STATES:
            return None
        if state == "PENDING" and reason in HOPELESS:
            _call(["scancel", job])
            return f"hopeless:{reason}"
        unanswered = 0
        if state in ("RUNNING", "COMPLETING") and started is None:
            started = now
        if started is None and now - submitted > queue_timeout_s:
            _call(["scancel", job])
            return "queue_timeout"
        if started is not None and now - started > spec.timeout_s:
            _call(["scancel", job])
            return "timeout"
        time.sleep(POLL_S)


def cancel_and_wait(job: str, limit_s: float = CALL_TIMEOUT_S) -> None:
    """scancel the job, then wait (bounded) until Slurm no longer lists it, so its folder outlives its tasks."""
    _call(["scancel", job])
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        answer = _squeue_state(job)
        if answer is not None and answer[0] in ("", *DONE_STATES):
            return
        time.sleep(POLL_S)


def _failure(
    spec: PointSpec,
    job: str,
    stopped: str | None,
    state: str,
    exit_code: str,
    tail: list[str],
    queue_timeout_s: float,
    wall: float,
) -> ChildOutcome | None:
    """Why a finished job failed the point, in one line: past the timeout, too long in the queue, unable to start as
    submitted, lost by squeue, or ended other than COMPLETED; None where it completed."""
    if stopped == "timeout":
        return ChildOutcome(
            "timeout",
            error=f"Slurm job {job} exceeded the {spec.timeout_s:g} s timeout and was cancelled",
            tail=tail,
            wall_s=wall,
        )
    if stopped == "queue_timeout":
        return ChildOutcome(
            "timeout",
            error=f"Slurm job {job} waited in the queue over {queue_timeout_s:g} s and was cancelled",
            wall_s=wall,
        )
    if stopped and stopped.startswith("hopeless:"):
        return ChildOutcome(
            "error",
            error=f"Slurm job {job} cannot start as submitted "
            f"({stopped.partition(':')[2]}: {spec.nodes} nodes x "
            f"{spec.devices_per_node} tasks) and was cancelled",
            wall_s=wall,
        )
    if stopped == "lost":
        return ChildOutcome(
            "error", error=f"squeue stopped answering about job {job}; it was cancelled", tail=tail, wall_s=wall
        )
    if state not in ("COMPLETED", "UNKNOWN") or exit_code not in ("0:0", ""):
        last = tail[-1] if tail else "no output"
        return ChildOutcome(
            "error", error=f"Slurm job {job} ended {state} (exit {exit_code}): {last}", tail=tail, wall_s=wall
        )
    return None


def launch(spec: PointSpec, python: str, on_progress: ProgressSink | None, config: HostsConfig) -> ChildOutcome:
    """Submit the point as a job, wait for it with bounded polls, and merge every rank's result."""
    if shutil.which("sbatch") is None:
        return ChildOutcome(
            "error",
            error="sbatch is not on PATH: run where Slurm's client commands are installed (see docs/scaling.md)",
        )
    try:
        extra = shlex.split(os.environ.get(EXTRA_ARGS_VAR, ""))
        queue_timeout_s = float(os.environ.get(QUEUE_TIMEOUT_VAR) or 3600)
    except ValueError as exc:
        return ChildOutcome("error", error=f"cannot read ${EXTRA_ARGS_VAR} or ${QUEUE_TIMEOUT_VAR}: {exc}")
    start = time.monotonic()
    with point_folder(spec, shared=True) as files:
        folder, result, script = files.path, files.result, files.path / "job.sh"
        script.write_text(BATCH_SCRIPT)
        script.chmod(0o755)
        env = rank_env(spec, config, 0)
        for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", NODE_HOSTS_VAR):
            env.pop(name)  # the batch script and srun set them on the allocation
        if spec.threads is None:
            for name in THREAD_VARS:
                env.pop(name, None)  # the worker splits the compute node's cores, not this machine's
        sub = _call(sbatch_argv(spec, script, folder, worker_argv(python, files), extra), env=env)
        if sub.returncode != 0:
            why = (sub.stderr.strip() or sub.stdout.strip() or f"exit code {sub.returncode}").splitlines()[-1]
            return ChildOutcome("error", error=f"sbatch refused the job: {why}")
        job = sub.stdout.strip().split(";")[0]
        follower = _OutputFollower(folder / "job.out", on_progress)
        try:
            stopped = wait_for(job, spec, queue_timeout_s, follower.poll)
        except BaseException:  # Ctrl-C or SIGTERM: cancel the job, and keep its folder until Slurm let it go
            cancel_and_wait(job)
            raise
        follower.poll()
        state, exit_code, fields = job_state(job)
        facts = {
            "slurm_job": job,
            "slurm_state": state,
            "slurm_nodes": fields.get("NodeList", ""),
            "world_size": str(spec.world_size),
        }
        failure = _failure(
            spec, job, stopped, state, exit_code, follower.tail, queue_timeout_s, time.monotonic() - start
        )
        out = collect(spec, result, failure, env=facts)
        out.tail = out.tail or follower.tail
        return out
