"""The report as one self-contained HTML file: inline CSS, inline SVG charts, no script, no external URL."""

from __future__ import annotations

import re

import jinja2
import markupsafe

from dlbench.report.chart_base import Chart, render_svg
from dlbench.report.document import Report
from dlbench.report.groups import Cell
from dlbench.results.schema import Metrics

_EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.IGNORECASE)


def fmt_number(v: float | None) -> str:
    """Samples/s with sensible digits: 12,345 / 123.4 / 1.23."""
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"


def fmt_half_ci(m: Metrics | None) -> str:
    """'± 12.3': half the width of the confidence interval."""
    if m is None or m.ci_high == m.ci_low:
        return ""
    return "± " + fmt_number((m.ci_high - m.ci_low) / 2)


def fmt_bytes(n: int | None) -> str:
    """Bytes as MiB or GiB."""
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fmt_ratio(v: float | None) -> str:
    """'0.93×'."""
    return "-" if v is None else f"{v:.2f}×"


def cell_title(c: Cell) -> str:
    """A tooltip for a cell: point id, run, CV, median step and the 1-device point used for the speedup."""
    r = c.point.result
    parts = [f"point {c.point.id} of run {c.point.run_id}"]
    if r.metrics:
        m = r.metrics
        parts += [f"CV {m.cv:.1%} over {len(m.repeat_throughputs)} repeats",
                  f"median step {m.median_step_s * 1000:.1f} ms", f"global batch {m.global_batch}"]
    if c.scaling is not None and c.baseline_id != c.point.id:
        parts.append(f"speedup vs 1-device point {c.baseline_id}")
    if c.hidden:
        parts.append(f"{c.hidden} earlier measurement(s) of this configuration not shown")
    return "; ".join(parts)


def environment() -> jinja2.Environment:
    """The jinja2 environment over the package's templates, with the report's filters."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("dlbench.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "html.j2"]),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(number=fmt_number, half_ci=fmt_half_ci, bytes=fmt_bytes, ratio=fmt_ratio,
                       cell_title=cell_title)
    return env


def _svg(chart: Chart) -> markupsafe.Markup:
    return markupsafe.Markup(render_svg(chart))  # matplotlib's own SVG output, escaped by matplotlib


def render_html(report: Report) -> str:
    """The report as one HTML document that needs nothing but itself."""
    page = environment().get_template("report.html.j2").render(r=report, svg=_svg)
    if _EXTERNAL.search(page):
        raise AssertionError("the HTML report would load an external resource")  # a bug, never user input
    return page
