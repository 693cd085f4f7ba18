"""The command line as the user typed it, recorded by `main` for the run it creates (kept with every point)."""

from __future__ import annotations

import shlex
import sys

_argv: list[str] | None = None


def record(argv: list[str] | None) -> None:
    """Remember the arguments `main` was given (None forgets them)."""
    global _argv
    _argv = None if argv is None else list(argv)


def command_line(fallback: str) -> str:
    """'dlbench ' and the arguments as typed: those `main` recorded, else the console script's; `fallback` where
    neither is known (an embedding that calls the click command directly)."""
    if _argv is not None:
        return "dlbench " + shlex.join(_argv)
    if sys.argv and sys.argv[0].endswith("dlbench"):
        return "dlbench " + shlex.join(sys.argv[1:])
    return fallback
