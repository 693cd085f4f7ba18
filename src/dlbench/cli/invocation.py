"""The command line as the user typed it, recorded by `main` for the run it creates (kept with every point), and
the moment it started: the busy note samples others' share of the CPUs from there (standard library only: `--help`
stays light)."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_argv: list[str] | None = None


@dataclass(frozen=True)
class Start:
    """When the command started: the monotonic clock, this process's CPU times then (os.times) and /proc/stat's
    text ('' where there is none)."""

    at: float
    times: os.times_result
    stat: str


_start: Start | None = None


def record(argv: list[str] | None) -> None:
    """Remember the arguments `main` was given and when (None forgets them)."""
    global _argv, _start
    _argv = None if argv is None else list(argv)
    _start = None if argv is None else Start(time.monotonic(), os.times(), _read(Path("/proc/stat")))


def started() -> Start | None:
    """When `main` started the command, or None (an embedding that calls a click command directly)."""
    return _start


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def command_line(fallback: str) -> str:
    """'dlbench ' and the arguments as typed: those `main` recorded, else the console script's; `fallback` where
    neither is known (an embedding that calls the click command directly)."""
    if _argv is not None:
        return "dlbench " + shlex.join(_argv)
    if sys.argv and sys.argv[0].endswith("dlbench"):
        return "dlbench " + shlex.join(sys.argv[1:])
    return fallback
