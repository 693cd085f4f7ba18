"""`dlbench reference list|show`: the published figures of the seed studies, as shipped data."""

from __future__ import annotations

import dataclasses
import json

import click

from dlbench import reference
from dlbench.cases import get_case
from dlbench.cli.numbers import AsciiIntRange
from dlbench.cli.output import stdout_console
from dlbench.reference import ReferenceRow, ReferenceSource
from dlbench.report.listing import REFERENCE_OPTIONAL, SOURCES_OPTIONAL, reference_table, sources_table


def _source_by_name(name: str) -> ReferenceSource:
    """A source by file name, with or without .yaml; a UsageError lists the known ones."""
    sources = reference.load_sources()
    for s in sources:
        if name in (s.file, s.file.removesuffix(".yaml")):
            return s
    known = ", ".join(s.file.removesuffix(".yaml") for s in sources)
    raise click.UsageError(f"unknown reference source {name!r}; known: {known}")


def _row_dict(r: ReferenceRow) -> dict[str, object]:
    d = dataclasses.asdict(r)
    d["source"] = r.source.file
    d["conditions"] = list(r.conditions)
    return d


@click.group("reference")
def reference_cmd() -> None:
    """Published training-throughput figures from the seed studies (DLPerf, Paddle, tf_cnn_benchmarks)."""


@reference_cmd.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(SOURCES_OPTIONAL)} is left out where the "
    "terminal is too narrow); outside a terminal, print the table at its full width.",
)
def list_sources(fmt: str, wide: bool = False) -> None:
    """Each source document: who published it, when, and how many figures it holds."""
    rows = reference.load_all()
    counts = {s.file: sum(1 for r in rows if r.source.file == s.file) for s in reference.load_sources()}
    sources = reference.load_sources()
    if fmt == "json":
        click.echo(
            json.dumps(
                [{**dataclasses.asdict(s), "rows": counts[s.file]} for s in sources], indent=2, ensure_ascii=False
            )
        )
        return
    out = stdout_console(wide)
    out.print(sources_table(sources, counts, wide=wide))
    out.print(
        "Show one: dlbench reference show NAME [--model resnet50 --precision amp --batch-size 256]",
        markup=False,
        highlight=False,
    )


@reference_cmd.command("show")
@click.argument("name", required=False)
@click.option("--model", "-m", help="Only this model (a case name or alias).")
@click.option("--framework", "-f", help="Only this framework (tf, torch, mxnet, paddle, oneflow ...).")
@click.option("--precision", "-p", type=click.Choice(sorted(reference.PRECISIONS)), help="Only this precision.")
@click.option("--batch-size", "-b", type=AsciiIntRange(min=1), help="Only this per-device batch.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(REFERENCE_OPTIONAL)} are left out where "
    "the terminal is too narrow); outside a terminal, print the table at its full width.",
)
def show(
    name: str | None,
    model: str | None,
    framework: str | None,
    precision: str | None,
    batch_size: int | None,
    fmt: str,
    wide: bool = False,
) -> None:
    """The figures of one source (or all), filtered; each with its hardware, conditions and source line."""
    source = _source_by_name(name) if name else None
    want_model = get_case(model).name if model else None
    if framework and framework not in reference.FRAMEWORKS:
        raise click.UsageError(f"unknown framework {framework!r}; known: {', '.join(sorted(reference.FRAMEWORKS))}")
    rows = [
        r
        for r in reference.load_all()
        if (source is None or r.source.file == source.file)
        and (want_model is None or r.model == want_model)
        and (framework is None or r.framework == framework)
        and (precision is None or r.precision == precision)
        and (batch_size is None or r.batch_size == batch_size)
    ]
    if fmt == "json":
        click.echo(json.dumps([_row_dict(r) for r in rows], indent=2, ensure_ascii=False))
        return
    out = stdout_console(wide)
    if source is not None:
        out.print(
            f"[bold]{source.title}[/] ({source.organisation}, {source.year or 'year not stated'}; "
            f"seed {source.seed_file})",
            highlight=False,
        )
        out.print(source.notes, highlight=False, style="dim")
    if not rows:
        empty_source = source is not None and not any(r.source.file == source.file for r in reference.load_all())
        out.print(
            "This source publishes charts only, no numbers: it has no figures to show."
            if empty_source
            else "No published figure matches these filters."
        )
        return
    out.print(reference_table(rows, wide=wide))
    out.print(f"{len(rows)} figure{'s' if len(rows) != 1 else ''}.")
