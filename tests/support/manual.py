"""The manual's commands as data: every `dlbench` command in a code block of docs/*.md, with the environment the
page sets before it, the variables its block assigns, and the output the page shows under it (`$ ` blocks); and the
shape of an output (its tables' headers, the labels its lines start with) to compare a command's with its page's."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

DOCS = REPO / "docs"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_ENV = re.compile(r"""^([A-Z][A-Z0-9_]*)=("[^"]*"|'[^']*'|\S+)(?:\s+|$)""")
RULE = "─"


@dataclass(frozen=True)
class Shown:
    """One command as a page shows it."""

    page: str
    command: str  # as written (continuation lines joined, its comment and environment prefix dropped)
    env: tuple[tuple[str, str], ...] = ()  # VAR=value before it on its line
    variables: tuple[tuple[str, str], ...] = ()  # VAR="..." its block assigned before it ($F, $TEAM)
    output: tuple[str, ...] | None = None  # what the page prints under it, in a `$ ` block
    exit_code: int | None = None  # `$ echo $?` after it

    @property
    def key(self) -> str:
        """'measuring.md: dlbench run ...'."""
        return f"{self.page}: {self.command}"

    def argv(self, replace: dict[str, str]) -> list[str]:
        """Its arguments after `dlbench`, the block's variables expanded and placeholders replaced."""
        text = self.command
        for old, new in replace.items():  # first: a test's stand-in wins over the page's value ($TEAM)
            text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, text)
        for name, value in self.variables:
            text = text.replace(f"${name}", value)
        return shlex.split(text)[1:]


def _strip_comment(line: str) -> str:
    """The line without its trailing shell comment (a '#' after whitespace, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if ch in "'\"":
            quote = "" if quote == ch else quote or ch
        elif ch == "#" and not quote and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _logical_lines(body: str) -> list[str]:
    """Lines with their backslash continuations joined."""
    out: list[str] = []
    for line in body.splitlines():
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return out


def _command(line: str, variables: dict[str, str], page: str) -> Shown | None:
    """A `dlbench` command line (with its VAR=value prefixes), or None for another line."""
    text = _strip_comment(line.strip()).removeprefix("export ")
    env = []
    while m := _ENV.match(text):
        env.append((m.group(1), " ".join(shlex.split(m.group(2)))))
        text = text[m.end() :]
    if not text:  # assignments alone: variables of the block ($F, $TEAM)
        variables.update(env)
        return None
    if not text.startswith("dlbench "):
        return None
    return Shown(page, " ".join(text.split()), tuple(env), tuple(variables.items()))


def _console(lines: list[str], page: str) -> list[Shown]:
    """A `$ ` block: each command with the lines printed under it."""
    found: list[Shown] = []
    variables: dict[str, str] = {}
    current: Shown | None = None
    printed: list[str] = []
    for line in [*lines, "$ "]:  # a last empty prompt closes the last command
        if line.startswith("$ echo $?"):
            continue
        if line.startswith("$ "):
            if current is not None:
                found.append(_with_output(current, printed))
            current, printed = _command(line[2:], variables, page), []
        elif current is not None:
            printed.append(line)
    return found


def _script(lines: list[str], page: str) -> list[Shown]:
    """A bash block: its `dlbench` commands."""
    variables: dict[str, str] = {}
    return [s for s in (_command(line, variables, page) for line in lines) if s is not None]


def shown_commands(docs: Path = DOCS) -> list[Shown]:
    """Every `dlbench` command in the code blocks of the manual's pages, in page order."""
    found: list[Shown] = []
    for path in sorted(docs.glob("*.md")):
        for fence in _FENCE.finditer(path.read_text(encoding="utf-8")):
            lang, lines = fence.group(1), _logical_lines(fence.group(2))
            if any(line.startswith("$ ") for line in lines):
                found += _console(lines, path.name)
            elif lang in ("bash", "sh", ""):
                found += _script(lines, path.name)
    return found


def _with_output(shown: Shown, printed: list[str]) -> Shown:
    """The command with the lines the page shows under it; an exit code the page echoes is its last line."""
    code = None
    if printed and printed[-1].strip().isdigit():
        code = int(printed.pop().strip())
    out = tuple(printed) if any(line.strip() for line in printed) else None
    return Shown(shown.page, shown.command, shown.env, shown.variables, out, code)


def headers(lines: list[str] | tuple[str, ...]) -> list[list[str]]:
    """The header words of every table in an output (the lines just above each rule of '─'), in order."""
    out = []
    for i, line in enumerate(lines):
        if line.strip() and set(line.strip()) == {RULE} and i:
            out.append(lines[i - 1].split())
    return out


def labels(lines: list[str] | tuple[str, ...]) -> list[str]:
    """What the lines outside the tables start with, where they start with a label of three words or fewer
    followed by ':' or ' =' ('Results', 'Method', 'Throughput', 'energy not measured')."""
    out = []
    for line in lines:
        if not line or line[0].isspace() or RULE in line:
            continue
        m = re.match(r"^([A-Za-z][\w ]{0,40}?)(?::\s| = )", line)
        if m and len(m.group(1).split()) <= 3:
            out.append(m.group(1))
    return out


def in_order(wanted: list[str], seen: list[str]) -> bool:
    """Whether `wanted` is a subsequence of `seen`."""
    it = iter(seen)
    return all(any(w == s for s in it) for w in wanted)


__all__ = ["DOCS", "Shown", "headers", "in_order", "labels", "shown_commands"]
