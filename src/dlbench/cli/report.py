"""`dlbench report`: the seeds' report from stored runs, as one HTML file or Markdown with charts beside it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import click

from dlbench.cli.numbers import AsciiIntRange
from dlbench.store.errors import EXIT_NOT_STORED
from dlbench.store.store import Store


class ReportNotWritten(click.ClickException):
    """Writing the report failed: one line, exit 2, or 4 (EXIT_NOT_STORED, as `run`) when the disk is full."""

    def __init__(self, message: str, exc: OSError) -> None:
        super().__init__(message)
        self.exit_code = EXIT_NOT_STORED if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 2  # type: ignore[misc]


def _write(doc: object, out: Path, fmt: str) -> list[Path]:
    """Write the built report as HTML (one file) or Markdown (with its chart folder); the files written."""
    if fmt == "html":
        from dlbench.report.files import write_atomic
        from dlbench.report.html import render_html

        write_atomic(out, render_html(doc))  # type: ignore[arg-type]
        return [out]
    from dlbench.report.markdown import write_markdown

    return write_markdown(doc, out)  # type: ignore[arg-type]


@click.command("report")
@click.argument("run_ids", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html", show_default=True)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Where to write it. Default: dlbench-report.html (or .md)."
)
@click.option(
    "--last", type=AsciiIntRange(min=1), default=1, show_default=True, help="With no RUN_ID: how many recent runs."
)
@click.option("--all", "all_runs", is_flag=True, help="Every run in the store.")
@click.option("--title", default="", help="Title of the report. Default: 'dlbench report'.")
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
def report(
    run_ids: tuple[str, ...],
    fmt: str,
    output: str | None,
    last: int,
    all_runs: bool,
    title: str,
    store_path: str | None,
) -> None:
    """Write a report of stored runs: tables per model, charts, published figures (RUN_ID prefixes work)."""
    store = Store(store_path, readonly=True)
    if run_ids:
        runs = [store.get_run(r) for r in run_ids]
    else:
        runs = store.runs() if all_runs else store.runs(limit=last)
    points = store.points([r.id for r in runs])
    if not points:
        raise click.UsageError("no points in the chosen runs: run `dlbench run` first, or name runs that have points")
    if output is not None and output.endswith(("/", os.sep)):  # Path() would drop the separator that names a folder
        raise click.UsageError(f"-o {output} names a folder: give the report's file, e.g. -o {output}report.{fmt}")
    out = Path(output) if output else Path(f"dlbench-report.{fmt}")
    if out.parent and not out.parent.exists():
        raise click.UsageError(f"the folder {out.parent} does not exist")
    from dlbench.report.files import OutputError, check_markdown_output, check_output

    try:  # before anything is built: a device, a FIFO, a folder or a chart folder dlbench did not make
        if fmt == "html":
            check_output(out)
        else:
            check_markdown_output(out)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    # matplotlib is imported only when a report is made
    from dlbench.report.document import build_report

    doc = build_report(runs, points, title=title, pool=store.points())
    try:
        written = _write(doc, out, fmt)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:  # a full disk (exit 4, as `run`), a folder it cannot replace a file in, /proc ...
        raise ReportNotWritten(f"cannot write {out}: {exc.strerror or exc}", exc) from None
    click.echo(
        f"Wrote {out.absolute()} ({doc.points} points from {len(runs)} run{'s' if len(runs) != 1 else ''}"
        + (f"; {doc.probes_text}" if doc.probes else "")
        + (f", {len(written) - 1} chart files beside it" if len(written) > 1 else "")
        + ")"
    )
