"""Consoles for the CLI: tables keep their width when output goes to a file or a pipe."""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 200  # the points table (throughput, TFLOP/s, MFU, speedup ...) fits on one line per row


WIDE_PIPE = 10_000  # --wide outside a terminal: a table is printed at its full width, never cropped


def stdout_console(wide: bool = False) -> Console:
    """A console on stdout; when stdout is not a terminal, $COLUMNS wide if set, else 200 columns (rich would
    squeeze to 80), and with --wide (`wide`) as wide as any table."""
    console = Console()
    if console.is_terminal:
        return console
    if wide:
        return Console(width=WIDE_PIPE)
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH)
