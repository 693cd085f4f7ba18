"""The width rule every terminal table goes through: the values that tell rows apart and the numbers are never cut.

A table is described as columns (`Col`) and rows of cells; `Fitted` lays it out when printed, at the console's
width:
1. a `shared` column whose value every row has (two rows or more) moves to the title;
2. the table is drawn at its natural width where that fits;
3. else its `optional` columns are left out, last first, until its key and number columns fit unwrapped (text
   columns squeezed), and a note under it names them;
4. number cells are never cut (they wrap at their spaces only where the table cannot fit otherwise), key cells
   wrap at spaces only (every word whole), `text` cells wrap at spaces and fold a word longer than their column;
   where even that cannot fit, the table is stacked: one block per row, one `header: value` line per column.
`wide` (--wide) keeps every column; outside a terminal it draws the table at its natural width, however wide.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from dlbench.printable import printable

Role = Literal["key", "number", "text"]
Cell = str | Text
GAP = 2  # cells between two columns: collapsed padding and the divider of TABLE_STYLE
TEXT_MIN = 24  # a text column is squeezed no narrower than this (or its longest header word)
# Two spaces between columns, a rule under the headers, no frame: the most room for the cells.
TABLE_STYLE: dict[str, object] = {
    "box": box.SIMPLE_HEAD,
    "pad_edge": False,
    "show_edge": False,
    "collapse_padding": True,
}


@dataclass(frozen=True)
class Col:
    """A column: `key` (tells rows apart) and `number` cells are never cut; `text` cells may wrap. `optional`
    columns are left out where the table cannot fit; a `shared` column with one value on every row is said once,
    in the title (as its bare value where `bare`, else 'header value')."""

    header: str
    role: Role = "text"
    justify: Literal["left", "right"] = "left"
    optional: bool = False
    shared: bool = False
    bare: bool = False
    squeeze: int = TEXT_MIN  # a text column's narrowest width (unless its header's longest word is wider)


def _text(cell: Cell) -> Text:
    """A cell as Text; a plain string's control characters escaped (a stored name is shown, never obeyed)."""
    return cell if isinstance(cell, Text) else Text(printable(cell))


def _width(cell: Cell) -> int:
    """The widest line of a cell, in terminal cells."""
    return max((cell_len(line) for line in _text(cell).plain.split("\n")), default=0)


def _longest_word(cells: Iterable[Cell]) -> int:
    return max((cell_len(w) for c in cells for w in _text(c).plain.split()), default=1)


@dataclass
class Layout:
    """What one width gives: the columns kept (indices), each one's width, those left out, or stacked."""

    keep: list[int]
    widths: list[int]
    dropped: list[str]
    stacked: bool
    split_numbers: bool = False


@dataclass
class Fitted:
    """A table that fits itself to the console when printed (see the module's rule)."""

    columns: list[Col]
    rows: list[list[Cell]]
    title: str = ""
    notes: list[str] = field(default_factory=list)
    wide: bool = False
    more: str = "--wide shows them"

    def __post_init__(self) -> None:
        said = []
        if len(self.rows) > 1:
            for j, col in enumerate(self.columns):
                values = {_text(r[j]).plain for r in self.rows}
                if col.shared and len(values) == 1 and (value := values.pop()) not in ("", "-"):
                    said.append((j, value if col.bare else f"{col.header} {value}"))
        if said:
            self.title = " · ".join([t for t in (self.title,) if t] + [s for _, s in said])
        gone = {j for j, _ in said}
        self.columns = [c for j, c in enumerate(self.columns) if j not in gone]
        self.rows = [[c for j, c in enumerate(r) if j not in gone] for r in self.rows]

    @property
    def headers(self) -> list[str]:
        """The headers of the columns left after the shared ones moved to the title."""
        return [c.header for c in self.columns]

    @property
    def caption(self) -> str:
        """The notes printed under the table, one a line."""
        return "\n".join(self.notes)

    def natural(self, j: int) -> int:
        """Column j's width with nothing wrapped."""
        return max([_width(self.columns[j].header), *(_width(r[j]) for r in self.rows)])

    def least(self, j: int, split_numbers: bool = False) -> int:
        """Column j's narrowest width: a number column its widest cell (its longest word with `split_numbers`), a
        key column its longest word (it wraps at spaces only), a text column its longest word but at most
        its `squeeze`; all at least their header's longest word."""
        col = self.columns[j]
        head = _longest_word([col.header])
        if col.role == "number" and not split_numbers:
            return max(head, *(_width(r[j]) for r in self.rows)) if self.rows else head
        if col.role != "text":
            return max(head, _longest_word([r[j] for r in self.rows]))
        return min(self.natural(j), max(head, min(col.squeeze, _longest_word([r[j] for r in self.rows]))))

    def layout(self, width: int) -> Layout:
        """The columns, their widths and what is left out at this width."""

        def span(cols: list[int], w: Callable[[int], int]) -> int:
            return sum(w(j) for j in cols) + GAP * max(0, len(cols) - 1)

        def snug(j: int) -> int:  # key and number columns unwrapped, text columns squeezed
            return self.least(j) if self.columns[j].role == "text" else self.natural(j)

        keep = list(range(len(self.columns)))
        dropped: list[str] = []
        while not self.wide and span(keep, snug) > width and (opt := [j for j in keep if self.columns[j].optional]):
            keep.remove(opt[-1])
            dropped.insert(0, self.columns[opt[-1]].header)
        if span(keep, self.natural) <= width:
            return Layout(keep, [self.natural(j) for j in keep], dropped, False)
        for split in (False, True):  # a number wraps at its spaces ('1,234.5' over '± 12.3') before the table stacks
            least = functools.partial(self.least, split_numbers=split)
            if span(keep, least) > width:
                continue
            widths = {j: least(j) for j in keep}
            room = width - span(keep, least)
            for j in sorted(keep, key=lambda j: (self.columns[j].role != "key", self.natural(j))):
                grow = min(room, self.natural(j) - widths[j])  # key columns first: they then wrap the least
                widths[j] += grow
                room -= grow
            return Layout(keep, [widths[j] for j in keep], dropped, False, split)
        return Layout(list(range(len(self.columns))), [], [], True)

    def table(self, lay: Layout) -> Table:
        """The rich Table of a (not stacked) layout, every column at its decided width."""
        t = Table(**TABLE_STYLE)  # type: ignore[arg-type]
        for j, w in zip(lay.keep, lay.widths):
            col = self.columns[j]
            t.add_column(
                Text(col.header, no_wrap=False, overflow="fold"),  # a header wider than its numbers wraps, whole
                justify=col.justify,
                width=w,
                overflow="fold",
                no_wrap=col.role == "number" and not lay.split_numbers,
            )
        for r in self.rows:
            t.add_row(*(_text(r[j]) for j in lay.keep))
        return t

    def stacked(self) -> list[Text]:
        """One block per row: 'header: value' lines (a value that does not fit beside its header goes under it)."""
        lines = [Text(self.title, style="bold")] if self.title else []
        for i, r in enumerate(self.rows):
            if i or lines:
                lines.append(Text(""))
            for col, cell in zip(self.columns, r):
                value = _text(cell)
                if not value.plain:
                    continue
                head = Text(f"{col.header}: ", style="bold")
                parts = value.split("\n")
                lines.append(head + parts[0])
                lines.extend(Text("  ") + p for p in parts[1:])
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Lay the table out at the console's width (its natural width with --wide outside a terminal)."""
        width = options.max_width
        if self.wide and not console.is_terminal:
            width = 10**6
        lay = self.layout(width)
        if lay.stacked:
            for line in self.stacked():
                line.overflow = "fold"
                yield line
        else:
            if self.title:
                yield Text(self.title, style="bold", overflow="fold")
            t = self.table(lay)
            yield from console.render(t, options.update_width(sum(lay.widths) + GAP * (len(lay.widths) - 1)))
        notes = [*self.notes]
        if lay.dropped:
            notes.append(f"Not shown at this width: {', '.join(lay.dropped)} ({self.more}).")
        elif lay.stacked and self.rows:
            notes.append(f"One block per row: the table does not fit in {options.max_width} columns.")
        for n in notes:
            yield Text(n, overflow="fold")


def fit(
    columns: Sequence[Col],
    rows: Iterable[Sequence[Cell]],
    title: str = "",
    notes: Sequence[str] = (),
    wide: bool = False,
    more: str = "--wide shows them",
) -> Fitted:
    """A table under the width rule (see the module's docstring); `more` says how to see left-out columns."""
    return Fitted(list(columns), [list(r) for r in rows], title, list(notes), wide, more)
