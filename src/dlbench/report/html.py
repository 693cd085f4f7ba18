"""The report as one self-contained HTML file: inline CSS, inline SVG charts, no script, no external URL."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import jinja2
import markupsafe

from dlbench.records import Metrics
from dlbench.report.chart_base import Chart, render_svg
from dlbench.report.convergence import NOT_CONVERGED_MARK, TARGET_COLUMNS, TARGET_NOTES, rows_note
from dlbench.report.digits import fmt_rate, fmt_spread
from dlbench.report.document import Report
from dlbench.report.groups import Cell
from dlbench.report.reproduce import id_commands, section_commands
from dlbench.report.telemetry import contended

_EXTERNAL_URL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
_EXTERNAL_CSS = re.compile(r"""url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|@import""", re.IGNORECASE)


class _ExternalFinder(HTMLParser):
    """Finds what a browser would fetch: src/href/xlink:href attributes pointing elsewhere, and CSS (style
    elements and attributes) with url(//...) or @import. Text is never looked at: escaped user text (a title
    that reads 'src=//x') is data, not markup."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        for name, value in attrs:
            if (
                value
                and name in ("src", "href", "xlink:href", "srcset", "action", "data")
                and _EXTERNAL_URL.match(value)
            ):
                self.found.append(f"<{tag} {name}={value!r}>")
            elif value and name == "style" and _EXTERNAL_CSS.search(value):
                self.found.append(f"<{tag} style={value!r}>")

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style and _EXTERNAL_CSS.search(data):
            self.found.append("a <style> element importing CSS")


def external_resources(page: str) -> list[str]:
    """Every resource the HTML page would load from elsewhere (none in a dlbench report)."""
    finder = _ExternalFinder()
    finder.feed(page)
    finder.close()
    return finder.found


def fmt_number(v: float | None) -> str:
    """Samples/s as the terminal writes them (report/digits.py): 12,345 / 123.4 / 1.23 / 0.12."""
    if v is None:
        return "-"
    return fmt_rate(v)


def fmt_half_ci(m: Metrics | None) -> str:
    """'± 12.3': half the width of the confidence interval, in the throughput's decimals; '' where there is none
    (fewer than 3 repeats: the templates say 'n=1' instead)."""
    if m is None or m.ci_low is None or m.ci_high is None or m.ci_high == m.ci_low:
        return ""
    return "± " + fmt_spread(m.throughput, (m.ci_high - m.ci_low) / 2)


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
        parts += [
            f"CV {m.cv:.1%} over {m.repeats} repeats"
            if m.cv is not None
            else f"{m.repeats} repeat{'s' if m.repeats != 1 else ''}: too few for a CI or a CV, noise unknown",
            f"median step {m.median_step_s * 1000:.1f} ms",
            f"global batch {m.global_batch}",
        ]
    if c.scaling is not None and c.baseline_id != c.point.id:
        parts.append(f"speedup vs 1-device point {c.baseline_id}")
    if c.hidden:
        parts.append(f"{c.hidden} earlier exact repeat(s) of this configuration not shown (the newest is)")
    return "; ".join(parts)


def environment() -> jinja2.Environment:
    """The jinja2 environment over the package's templates, with the report's filters."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dlbench.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        number=fmt_number,
        half_ci=fmt_half_ci,
        bytes=fmt_bytes,
        ratio=fmt_ratio,
        cell_title=cell_title,
        contended=contended,
        reproduce=section_commands,
        reproduce_ids=id_commands,
        unconverged_note=rows_note,
    )
    return env


def convergence_globals() -> dict[str, object]:
    """What both templates need to draw the convergence section and its mark."""
    return {"mark": NOT_CONVERGED_MARK, "target_columns": TARGET_COLUMNS, "target_notes": TARGET_NOTES}


def _svg(chart: Chart) -> markupsafe.Markup:
    return markupsafe.Markup(render_svg(chart))  # matplotlib's own SVG output, escaped by matplotlib


def render_html(report: Report) -> str:
    """The report as one HTML document that needs nothing but itself."""
    page = environment().get_template("report.html.j2").render(r=report, svg=_svg, **convergence_globals())
    found = external_resources(page)
    if found:  # user text is escaped, so this is a bug in a template, never bad input
        raise AssertionError(f"the HTML report would load an external resource: {found[0]}")
    return page
