"""`dlbench report`: the seeds' report from stored runs, as one HTML file or Markdown with charts beside it."""

from __future__ import annotations

from pathlib import Path

import click

from dlbench.store.store import Store


@click.command("report")
@click.argument("run_ids", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write it. Default: dlbench-report.html (or .md).")
@click.option("--last", type=click.IntRange(min=1), default=1, show_default=True,
              help="With no RUN_ID: how many recent runs.")
@click.option("--all", "all_runs", is_flag=True, help="Every run in the store.")
@click.option("--title", default="", help="Title of the report. Default: 'dlbench report'.")
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
def report(run_ids: tuple[str, ...], fmt: str, output: Path | None, last: int, all_runs: bool, title: str,
           store_path: str | None) -> None:
    """Write a report of stored runs: tables per model, charts, published figures (RUN_ID prefixes work)."""
    store = Store(store_path, readonly=True)
    if run_ids:
        runs = [store.get_run(r) for r in run_ids]
    else:
        runs = store.runs() if all_runs else store.runs(limit=last)
    points = store.points([r.id for r in runs])
    if not points:
        raise click.UsageError("no points in the chosen runs: run `dlbench run` first, or name runs that have points")
    out = output or Path(f"dlbench-report.{fmt}")
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
    if fmt == "html":
        from dlbench.report.files import write_atomic
        from dlbench.report.html import render_html

        write_atomic(out, render_html(doc))
        written = [out]
    else:
        from dlbench.report.markdown import write_markdown

        written = write_markdown(doc, out)
    click.echo(f"Wrote {out} ({doc.points} points from {len(runs)} run{'s' if len(runs) != 1 else ''}"
               + (f"; {doc.probes_text}" if doc.probes else "")
               + (f", {len(written) - 1} chart files beside it" if len(written) > 1 else "") + ")")
