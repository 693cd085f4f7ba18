"""Number options that read only ASCII digits: Python's int() and float() take any Unicode digit ('٣' is 3),
so without these `--steps ٣` would run 3 steps where the user may have meant something else entirely."""

from __future__ import annotations

from typing import Any

import click


def _ascii_only(value: Any, param: click.Parameter | None, ctx: click.Context | None, kind: str) -> None:
    """Fail (one line, exit 2) on a number typed with characters outside ASCII."""
    if isinstance(value, str) and not value.isascii():
        raise click.BadParameter(f"{value!r} is not {kind} written in ASCII digits", ctx=ctx, param=param)


class AsciiIntRange(click.IntRange):
    """click.IntRange reading ASCII digits only."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _ascii_only(value, param, ctx, "an integer")
        return super().convert(value, param, ctx)


class AsciiFloatRange(click.FloatRange):
    """click.FloatRange reading ASCII digits only."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _ascii_only(value, param, ctx, "a number")
        return super().convert(value, param, ctx)


class ThreadsOption(AsciiIntRange):
    """--threads: 'auto' (None: the cores others leave free, chosen just before each point) or a count >= 1."""

    name = "auto|integer"

    def __init__(self) -> None:
        super().__init__(min=1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
            return None
        if isinstance(value, str) and not value.strip().isdigit():
            self.fail(f"{value!r}: give auto or a whole number of threads >= 1", param, ctx)
        return super().convert(value, param, ctx)


__all__ = ["AsciiFloatRange", "AsciiIntRange", "ThreadsOption"]
