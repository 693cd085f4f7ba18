"""What a long command says while it works: a busy machine before the first point, how to measure again after
Ctrl-C, and setup's lines on a console (what they say lives with provisioning: envs/provision.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
import psutil
from rich.console import Console
from rich.text import Text

from dlbench.cli.invocation import started
from dlbench.machine.contention import others_share_now, others_share_since, tree
from dlbench.machine.env import choose_device
from dlbench.machine.telemetry import CONTENTION_SHARE

SUGGESTED_WAIT_S = 300
START_WINDOW_S = 10.0  # the busy note reads from the command's start up to this long after it; later, afresh


def say_device(device: str) -> None:
    """For --device auto, one stderr line saying which device was chosen and why (after input was validated)."""
    if device == "auto":
        chosen, why = choose_device(device)
        click.echo(f"device: {chosen} ({why})", err=True)


def busy_line(interval_s: float = 0.5, threads: int | None = None) -> str | None:
    """A line saying the machine is busy (others' share of this process's CPUs above the contention threshold, and
    the load), what `--threads auto` (threads None) or --threads N does about it, and the option that waits for
    quiet; None on a quiet machine. The share is read from when the command started (its imports and checks are
    its own time, not others'), over at least `interval_s`: a command that took that long to reach its first point
    does not wait for it. One that took over START_WINDOW_S (a max-batch search ran first) reads afresh: the note
    is about now."""
    me = psutil.Process()
    start = started()
    recent = start is not None and start.stat and time.monotonic() - start.at <= START_WINDOW_S
    share = (
        others_share_since(start.at, start.times, start.stat, interval_s)
        if start is not None and recent
        else others_share_now(lambda: tree(me), interval_s)
    )
    if share is None or share <= CONTENTION_SHARE:
        return None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpus = len(me.cpu_affinity() or []) if hasattr(me, "cpu_affinity") else os.cpu_count()
    return (
        f"this machine is busy: other processes use {share:.0%} of its {cpus} CPUs"
        + (f" (load {load:.1f})" if load is not None else "")
        + (
            "; --threads auto (the default) gives each CPU point the cores they leave free, measured just before it "
            "(the notes under the table say how many). "
            if threads is None
            else f"; with --threads {threads}, a point that needs cores they hold will be slower and marked contended. "
        )
        + f"--wait-quiet {SUGGESTED_WAIT_S} waits up to {SUGGESTED_WAIT_S // 60} minutes before each point for it "
        "to calm down."
    )


def say_busy(console: Console, wait_quiet_s: float, threads: int | None = None) -> None:
    """Print busy_line() before the first point, unless --wait-quiet already waits for quiet."""
    if wait_quiet_s > 0:
        return
    line = busy_line(threads=threads)
    if line:
        console.print(f"[bold yellow]note:[/] {line}", highlight=False)


def interrupted_line(run_id: str, command: str) -> str:
    """What `run` says on Ctrl-C: where the finished points are, and that it measures again, not resumes."""
    return (
        f"interrupted: the finished points are stored in run {run_id} (dlbench results {run_id}). `dlbench run` "
        f"does not resume: to measure the rest, run the command again: {command}"
    )


class ConsoleFeedback:
    """envs.provision's Feedback on a rich console: plain lines (a warning in yellow), a spinner for a status."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @property
    def live(self) -> bool:
        """A terminal shows the spinner."""
        return self.console.is_terminal

    def say(self, text: str, warning: bool = False) -> None:
        """One plain line: no markup read from it."""
        self.console.print(Text(text, style="yellow" if warning else ""), highlight=False)

    @contextmanager
    def status(self, label: str) -> Iterator[Callable[[str], None]]:
        """The console's spinner while the block runs; the block's function replaces its text."""
        with self.console.status(Text(label)) as spinner:
            yield lambda text: spinner.update(Text(text))
