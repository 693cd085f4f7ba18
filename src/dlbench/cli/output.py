"""Consoles for the CLI: tables keep their width when output goes to a file or a pipe, and text reaches the terminal
through the one escape (dlbench.printable)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from dlbench.printable import printable

PIPE_WIDTH = 200  # the points table (throughput, TFLOP/s, MFU, speedup ...) fits on one line per row


WIDE_PIPE = 10_000  # --wide outside a terminal: a table is printed at its full width, never cropped


class SafeConsole(Console):
    """A console whose text arguments have their control characters escaped (dlbench.printable): a stored string
    (a command, a host name, an interpreter's path) holding escape codes is shown, never obeyed. rich passes ESC
    through as it is; dlbench's own styling is markup and Text styles, which this leaves alone."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Console.print, each str argument escaped first."""
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)


def stdout_console(wide: bool = False) -> Console:
    """A console on stdout; when stdout is not a terminal, $COLUMNS wide if set, else 200 columns (rich would
    squeeze to 80), and with --wide (`wide`) as wide as any table."""
    console = SafeConsole()
    if console.is_terminal:
        return console
    if wide:
        return SafeConsole(width=WIDE_PIPE)
    columns = os.environ.get("COLUMNS", "")
    return SafeConsole(width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH)
