"""Consoles for the CLI: tables keep their width when output goes to a file or a pipe."""

from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 160


def stdout_console() -> Console:
    """A console on stdout; 160 columns when stdout is not a terminal (rich would squeeze to 80)."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)
