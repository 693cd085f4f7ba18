"""Stored text reaches the terminal through the one escape (#41): the CLI's stdout console and every fitted table
escape control characters in plain strings, so a tampered store cannot clear the screen or retitle the terminal;
dlbench's own styling (markup, Text styles) is left as it is."""

from __future__ import annotations

import io

from rich.text import Text

from dlbench.cli.output import SafeConsole
from dlbench.report.fit import Col, fit

CLEAR = "\x1b[2J\x1b]0;owned\x07"


def _render(*objects: object) -> str:
    buffer = io.StringIO()
    SafeConsole(file=buffer, width=120, force_terminal=True, color_system="standard").print(*objects, highlight=False)
    return buffer.getvalue()


def test_the_console_escapes_stored_text_and_keeps_its_own_styles() -> None:
    out = _render(f"host: {CLEAR}", "[bold]ok[/]")
    assert "\\x1b[2J" in out and "\\x07" in out and "\x1b[2J" not in out and "\x07" not in out
    assert "\x1b[1m" in out  # the markup's bold is still sent as a style


def test_a_table_cell_is_escaped() -> None:
    table = fit([Col("host", "key"), Col("note")], [(f"vm{CLEAR}", "fine")], title="t")
    out = _render(table)
    assert "\\x1b[2J" in out and "\x1b[2J" not in out and "\x07" not in out
    styled = fit([Col("a", "key")], [(Text("yes", style="green"),)], title="t")
    assert "yes" in _render(styled)
