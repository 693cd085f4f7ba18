"""The reproduce command of every point a report table shows (`dlbench reproduce ID`), for the templates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dlbench.report.groups import Section
from dlbench.store.request import reproduce_command

Line = tuple[str, str]  # (which point, in the table's words; its command)


def section_commands(section: Section, framework: str | None = None, batch_size: int | None = None) -> list[Line]:
    """(column · row, command) for every point in a section's table, in table order; optionally only one
    framework's at one batch size (a strategy study drawn from the section)."""
    out = []
    for row in section.rows:
        for col in section.columns:
            cell = section.cell(row, col)
            if cell is None or not cell.point.uid:
                continue
            if (framework is not None and col.framework != framework) or (
                batch_size is not None and row.batch_size != batch_size
            ):
                continue
            out.append((f"{col.title} · {row.label}", reproduce_command(cell.point.uid)))
    return out


def id_commands(ids: Iterable[int], uids: Mapping[int, str]) -> list[Line]:
    """('#N', command) for points named by their row id in this store (GPT layouts, searched maxima)."""
    return [(f"#{i}", reproduce_command(uids[i])) for i in dict.fromkeys(ids) if uids.get(i)]
