"""How a point's child processes ended: the group's exit codes and output tails, the one-line reason of a failure
(a timeout, the memory limit, a signal, an exit code with the most telling output line) and the outcome a launcher
hands back; a Ctrl-C that still left a result. Plain records: nothing here starts or stops a process."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.wire import WorkerResult

TAIL_LINES = 15


@dataclass
class ChildOutcome:
    """How a point's child process(es) ended: a status, the (merged) worker result if any, the last output lines."""

    status: str
    result: WorkerResult | None = None
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class PointInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a point whose worker stopped on it and wrote its result: a convergence run keeps
    its curve so far. It carries what the worker left up to the caller, which keeps it and stops as for any
    Ctrl-C; a caller that knows nothing of it sees a KeyboardInterrupt."""

    def __init__(self, outcome: ChildOutcome, result: PointResult | None = None) -> None:
        super().__init__("interrupted")
        self.outcome = outcome
        self.result = result  # the point's record, once launch/point.py has made it


@dataclass
class GroupOutcome:
    """How a group of commands ended: exit codes (None = killed), why killed, output tails, wall time."""

    codes: list[int | None]
    killed: str | None = None
    tails: list[list[str]] = field(default_factory=list)
    wall_s: float = 0.0
    peak_rss: int = 0
    oom_kills: int = 0  # the kernel's out-of-memory kills on this host while the group ran (/proc/vmstat)


def signal_name(code: int) -> str:
    """The name of the signal behind a negative exit code."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _last_line(lines: Sequence[str]) -> str:
    """The most telling output line: the last one naming an error, else the last one."""
    for line in reversed(lines):
        low = line.lower()
        if any(
            word in low
            for word in (
                "error",
                "exception",
                "failed",
                "timed out",
                "timeout",
                "refused",
                "cannot",
                "no such",
                "unreachable",
                "killed",
                "signal",
            )
        ):
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else "no output"


def group_failure(spec: PointSpec, group: GroupOutcome, labels: Sequence[str]) -> ChildOutcome | None:
    """A failed outcome when the group was killed or a command failed, with a one-line reason; else None.

    A SIGKILL the controller did not send is `crashed`, named as such: the kernel's out-of-memory killer is one
    cause among several (an administrator, a job scheduler), and dlbench cannot tell which.
    """
    tail = [f"[{labels[i]}] {line}" if len(labels) > 1 else line for i, t in enumerate(group.tails) for line in t][
        -TAIL_LINES * 2 :
    ]
    if group.killed == "timeout":
        return ChildOutcome(
            "timeout", error=f"exceeded the {spec.timeout_s:g} s timeout", tail=tail, wall_s=group.wall_s
        )
    if group.killed == "oom":
        return ChildOutcome(
            "oom",
            error=f"passed the memory limit of {spec.memory_limit_bytes} bytes (reached {group.peak_rss})",
            tail=tail,
            wall_s=group.wall_s,
        )
    bad = [i for i, c in enumerate(group.codes) if c not in (0, None)]
    if not bad:
        return None
    i = bad[0]
    code = group.codes[i]
    assert code is not None
    died = code < 0 and -code in signal.valid_signals()
    if died and -code == signal.SIGKILL and group.oom_kills > 0:
        return ChildOutcome(
            "oom",
            error=f"{labels[i]} was killed by the kernel's out-of-memory killer (/proc/vmstat "
            f"oom_kill rose by {group.oom_kills} while it ran): this machine's memory "
            "ran out",
            tail=tail,
            wall_s=group.wall_s,
        )
    if died:
        how = f"died from {signal_name(code)}"
        if -code == signal.SIGKILL:
            how += " (sent by another process: the kernel's out-of-memory killer, a scheduler or a user)"
    else:
        how = f"exited with code {code}"
    return ChildOutcome(
        "crashed" if died else "error",
        error=f"{labels[i]} {how}: {_last_line(group.tails[i])}",
        tail=tail,
        wall_s=group.wall_s,
    )


__all__ = [
    "TAIL_LINES",
    "ChildOutcome",
    "GroupOutcome",
    "PointInterrupted",
    "group_failure",
    "signal_name",
]
