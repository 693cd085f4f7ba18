"""The report as Markdown, with its charts written as PNG files in a folder beside it."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from dlbench.report.chart_base import Chart, render_png
from dlbench.report.document import Report
from dlbench.report.files import (
    chart_folder,
    check_markdown_output,
    mark_chart_folder,
    replace_chart_folder,
    temp_folder_beside,
    write_atomic,
)
from dlbench.report.html import convergence_globals, environment

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#|~])")  # ".", "-", "+" matter only at a line's start: never here


def md_escape(text: object) -> str:
    """Text shown as itself in Markdown (a heading, a table cell, a link text): HTML escaped, every Markdown
    punctuation mark backslash-escaped, one line."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(" ".join(str(text).splitlines()), quote=False))


def md_code(text: object) -> str:
    """Inline code that shows the text as itself: fenced by more backticks than any run inside it."""
    body = " ".join(str(text).splitlines())
    fence = "`" * (max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def write_markdown(report: Report, path: Path) -> list[Path]:
    """Write PATH and PATH's charts under <stem>_files/ (replacing only a folder dlbench made); returns every
    file written (the Markdown first)."""
    folder = chart_folder(path)
    check_markdown_output(path)
    tmp_folder = temp_folder_beside(folder)
    try:
        images: dict[str, str] = {}
        written: list[Path] = []
        charts: list[Chart] = [c for v in report.sections for c in v.charts.charts]
        charts += report.special.charts + report.convergence_charts.charts + report.strategies.charts.charts
        charts += report.overall.charts
        for chart in charts:
            name = f"{chart.slug}.png"
            (tmp_folder / name).write_bytes(render_png(chart))
            images[chart.slug] = f"{folder.name}/{name}"
            written.append(folder / name)
        mark_chart_folder(tmp_folder, [p.name for p in written])
        env = environment()
        env.autoescape = False
        env.filters["md"] = md_escape
        env.filters["code"] = md_code
        text = env.get_template("report.md.j2").render(r=report, images=images, **convergence_globals())
        replace_chart_folder(tmp_folder, folder)
    except BaseException:
        shutil.rmtree(tmp_folder, ignore_errors=True)
        raise
    write_atomic(path, text)
    return [path, *written]
