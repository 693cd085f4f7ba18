"""The report as Markdown, with its charts written as PNG files in a folder beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlbench.report.chart_base import Chart, render_png
from dlbench.report.document import Report
from dlbench.report.html import environment


def md_escape(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_markdown(report: Report, path: Path) -> list[Path]:
    """Write PATH and PATH's charts under <stem>_files/; returns every file written (the Markdown first)."""
    folder = path.with_name(f"{path.stem}_files")
    tmp_folder = path.with_name(f".{path.stem}_files.part")
    shutil.rmtree(tmp_folder, ignore_errors=True)
    tmp_folder.mkdir(parents=True)
    images: dict[str, str] = {}
    written: list[Path] = []
    charts: list[Chart] = [c for v in report.sections for c in v.charts.charts] + report.overall.charts
    for chart in charts:
        name = f"{chart.slug}.png"
        (tmp_folder / name).write_bytes(render_png(chart))
        images[chart.slug] = f"{folder.name}/{name}"
        written.append(folder / name)
    env = environment()
    env.autoescape = False
    env.filters["md"] = md_escape
    text = env.get_template("report.md.j2").render(r=report, images=images)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    tmp_folder.replace(folder)
    tmp.replace(path)
    return [path, *written]
