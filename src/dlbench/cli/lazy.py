"""A click group whose sub-commands are imported only when one runs (click's documented lazy-loading pattern), so
that `dlbench --version`, `dlbench --help` and a sub-command import nothing of the others (SQLAlchemy, SciPy,
matplotlib, Jinja ...). `--help` lists each command from the first paragraph of its help, kept in the table;
tests/unit/cli/test_startup.py checks that it is what the command itself says."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import click


def short_help(name: str, summary: str, limit: int) -> str:
    """What click lists for a command whose help begins with summary."""
    return click.Command(name, help=summary).get_short_help_str(limit)


class LazyGroup(click.Group):
    """A group of sub-commands named by 'module:attribute', with the first paragraph of each one's help."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy: dict[str, tuple[str, str]] = {}

    def add_lazy(self, name: str, target: str, summary: str) -> None:
        """Register a sub-command that is imported from target ('dlbench.cli.run:run') when used."""
        self.lazy[name] = (target, summary)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every sub-command, loaded or not."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The sub-command, imported on first use."""
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of --help, without importing any sub-command."""
        names: Sequence[str] = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if cmd is not None:
                if not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(limit)))
            else:
                rows.append((name, short_help(name, self.lazy[name][1], limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


__all__ = ["LazyGroup", "short_help"]
