"""The listing tables (`reference list|show`, `list`, `sweep --dry-run|--list`, the max-batch table), under the
width rule of report/fit.py."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from dlbench.reference import ReferenceRow, ReferenceSource
from dlbench.report.fit import Cell, Col, Fitted, fit

# Columns each command leaves out first where the terminal is narrow (its --help names them).
REFERENCE_OPTIONAL = ("line", "source")
SOURCES_OPTIONAL = ("organisation",)
CASES_OPTIONAL = ("model", "optimizer")
FRAMEWORKS_OPTIONAL = ("build", "python")
DRY_RUN_OPTIONAL = ("compile",)
MAXBATCH_OPTIONAL = ("bound", "note")


def reference_table(rows: Sequence[ReferenceRow], wide: bool = False) -> Fitted:
    """Published figures: what tells them apart, their samples/s and speedup, and the line of the source."""
    cols = [
        Col("source", "key", shared=True, optional=True),
        Col("framework", "key", shared=True),
        Col("model", "key", shared=True),
        Col("hardware", "key", shared=True),
        Col("devices", "key", "right", shared=True),
        Col("precision", "key", shared=True),
        Col("batch", "key", "right", shared=True),
        Col("data", "key", shared=True),
        Col("conditions"),
        Col("samples/s", "number", "right"),
        Col("speedup", "number", "right", shared=True),
        Col("line", "number", "right", optional=True),
    ]
    body: list[list[Cell]] = []
    for r in rows:
        version = f" {r.framework_version}" if r.framework_version else ""
        body.append(
            [
                r.source.file.removesuffix(".yaml"),
                r.framework + version,
                r.model + (f" {r.model_variant}" if r.model_variant else ""),
                r.hardware,
                str(r.devices),
                r.precision,
                str(r.batch_size),
                r.data or "-",
                ", ".join(r.conditions),
                f"{r.throughput:,.2f}",
                f"{r.speedup:.2f}" if r.speedup else "-",
                str(r.source_line),
            ]
        )
    return fit(cols, body, title="published figures", wide=wide)


def sources_table(sources: Sequence[ReferenceSource], counts: dict[str, int], wide: bool = False) -> Fitted:
    """Each source document: its name, how many figures, year, organisation and title."""
    cols = [
        Col("name", "key"),
        Col("figures", "number", "right"),
        Col("year", "number", "right"),
        Col("organisation", optional=True),
        Col("title"),
    ]
    body = [
        [
            s.file.removesuffix(".yaml"),
            str(counts[s.file]) if counts[s.file] else "0 (charts only)",
            str(s.year or "-"),
            s.organisation,
            s.title,
        ]
        for s in sources
    ]
    return fit(cols, body, title="published reference figures", wide=wide)


def cases_table(rows: Sequence[Sequence[str]], wide: bool = False) -> Fitted:
    """`dlbench list`'s cases: case, model, input, optimizer, parameters, batch (fixed / cpu)."""
    cols = [
        Col("case", "key"),
        Col("model", optional=True),
        Col("input", "key"),
        Col("optimizer", optional=True),
        Col("parameters", "number", "right"),
        Col("batch (fixed / cpu)", "number", "right"),
    ]
    return fit(cols, rows, title="cases", wide=wide)


def frameworks_table(rows: Sequence[Sequence[Cell]], wide: bool = False) -> Fitted:
    """`dlbench list`'s frameworks: name, installed, version, build, python, environment or the reason."""
    cols = [
        Col("framework", "key"),
        Col("installed", "key"),
        Col("version", "key"),
        Col("build", optional=True),
        Col("python", optional=True),
        Col("environment / reason"),
    ]
    return fit(cols, rows, title="frameworks", wide=wide)


def support_table(cases: Sequence[str], rows: Sequence[Sequence[Cell]]) -> Fitted:
    """`dlbench list`'s case support: one row per installed framework, one column per case."""
    cols = [Col("framework", "key"), *(Col(c) for c in cases)]
    return fit(cols, rows, title="case support (yes = builds the case with exactly its parameter count)")


def gpu_builds_table(rows: Sequence[Sequence[Cell]], wide: bool = False) -> Fitted:
    """`dlbench list`'s GPU builds: per framework, whether a build runs on Hopper and Blackwell, on PyPI or not, and
    what to do."""
    cols = [Col("framework", "key"), Col("Hopper", "key"), Col("Blackwell", "key"), Col("PyPI", "key"), Col("how")]
    return fit(cols, rows, title="GPU builds (PTX: JIT-compiled once at start)", wide=wide)


def dry_run_table(title: str, rows: Sequence[Sequence[str]]) -> Fitted:
    """`sweep --dry-run`: one row per planned point, with its memory estimate per device (analysis/memory.py); the
    axes every point shares are said in the title."""
    cols = [
        Col("#", "number", "right"),
        *(Col(h, "key", shared=True) for h in ("framework", "model", "batch", "precision")),
        Col("compile", "key", shared=True, optional=True),
        *(Col(h, "key", shared=True) for h in ("data", "scale", "strategy")),
        Col("memory/device", "number", "right", optional=True),
    ]
    return fit(cols, rows, title=title, more="a wider terminal, or COLUMNS=200 in a pipe, shows them")


def run_plan_table(title: str, rows: Sequence[Sequence[str]]) -> Fitted:
    """`run --dry-run`: one row per point, its memory estimate per device, the limit here and whether it fits; the
    axes every point shares are said in the title."""
    cols = [
        Col("#", "number", "right"),
        *(Col(h, "key", shared=True) for h in ("framework", "model", "batch", "precision", "scale")),
        Col("strategy", "key", shared=True, optional=True),
        Col("memory/device", "number", "right"),
        Col("limit here", "number", "right"),
        Col("fits", "key"),
        Col("runs", "key"),
    ]
    return fit(cols, rows, title=title, more="a wider terminal, or COLUMNS=200 in a pipe, shows them")


def suites_table(rows: Sequence[tuple[str, str]]) -> Fitted:
    """`sweep --list`: each built-in suite's name (whole) and title (wraps)."""
    return fit([Col("suite", "key"), Col("title")], rows, title="built-in suites")


def maxbatch_rows_table(title: str, rows: Sequence[Sequence[str]]) -> Fitted:
    """A sweep's max searches: one row per search."""
    cols = [
        Col("framework", "key"),
        Col("model", "key"),
        Col("precision", "key", shared=True),
        Col("max", "number", "right"),
        Col("exact", "key"),
        Col("probes (new)", "number", "right"),
        Col("bound", "number", "right", optional=True),
        Col("samples/s at max", "number", "right"),
        Col("note", optional=True),
    ]
    return fit(cols, rows, title=title, more="a wider terminal, or COLUMNS=200 in a pipe, shows them")


def env_table(rows: Sequence[tuple[str, str, str]]) -> Fitted:
    """`dlbench env`: each key, its value and whether it is an identity or a descriptive key."""
    return fit([Col("key", "key"), Col("value", "key"), Col("kind", "key")], rows, title="environment")


def styled(markup: str) -> Text:
    """A cell from rich markup (a coloured 'no' in the support table)."""
    return Text.from_markup(markup)
