"""Consoles for the CLI: tables keep their width when output goes to a file or a pipe."""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 200  # the points table (throughput, TFLOP/s, MFU, speedup ...) fits on one line per row


def stdout_console() -> Console:
    """A console on stdout; when stdout is not a terminal, $COLUMNS wide if set, else 200 columns (rich would
    squeeze to 80)."""
    console = Console()
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH)
