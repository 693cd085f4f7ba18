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
from dlbench.report.rcp import RCP_OPTIONAL, Commands, rcp_table


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


@reference_cmd.command("convergence")
@click.option("--model", "-m", help="Only this model (a case name or alias).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(RCP_OPTIONAL)} are left out where the terminal is too narrow); "
    "outside a terminal, print the table at its full width.",
)
def convergence(model: str | None, fmt: str, wide: bool = False) -> None:
    """The shipped reference convergence points --converge judges against: per case and configuration, the
    reference runs' steps to target, who measured them, on what, and the command (docs/convergence.md)."""
    from dlbench.reference.rcp import shipped

    want = get_case(model).name if model else None
    points = [p for p in shipped() if want is None or p.key.model == want]
    if fmt == "json":
        rows = []
        for p in points:
            raw = p.model_dump(mode="json")
            raw["key"]["params"] = dict(p.key.params)
            rows.append({**raw, "mean": p.mean, "spread": p.spread})
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    out = stdout_console(wide)
    if not points:
        out.print("No shipped reference convergence point matches.")
        return
    out.print(rcp_table(points, wide=wide))
    out.print(Commands(tuple(points)))


@reference_cmd.command("measure-convergence")
@click.option("--model", "-m", required=True, help="The case (a name or alias).")
@click.option("--batch-size", "-b", type=AsciiIntRange(min=1), help="Per-device batch. Default: the case's.")
@click.option("--param", "params", multiple=True, help="A case parameter, NAME=VALUE (repeatable).")
@click.option("--input-size", type=AsciiIntRange(min=1), help="Image side / sequence length.")
@click.option("--runs", type=AsciiIntRange(min=5), default=5, show_default=True, help="Reference runs (seeds 100 ..).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--threads", type=AsciiIntRange(min=1), help="CPU threads of each run.")
@click.option("--converge-steps", "budget", type=AsciiIntRange(min=1), help="Step budget. Default: the case's.")
@click.option("--timeout", type=AsciiIntRange(min=1), default=7200, show_default=True, help="Seconds per run.")
@click.option("--by", default="", help="Who measures (kept in the point).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Folder to write the point's file into.")
@click.option("--store", "store_path", type=click.Path(), help="Result store for the runs.")
def measure_convergence(
    model: str,
    batch_size: int | None,
    params: tuple[str, ...],
    input_size: int | None,
    runs: int,
    device: str,
    threads: int | None,
    budget: int | None,
    timeout: int,
    by: str,
    out_dir: str | None,
    store_path: str | None,
) -> None:
    """Measure a reference convergence point: torch fp32 on one device, N seeds, each trained to the case's target
    and evaluated on held-out data; writes the point's file (ship it under src/dlbench/reference/rcp/)."""
    from pathlib import Path

    from rich.console import Console

    from dlbench.cli.invocation import command_line
    from dlbench.cli.progress import RunProgress
    from dlbench.cli.values import as_params
    from dlbench.reference.rcp import file_name
    from dlbench.runapi.rcp import RcpRequest, measure_rcp, rcp_specs

    combos, searched = as_params(params)
    if searched or len(combos) != 1:
        raise click.UsageError("--param takes one value per parameter here (NAME=VALUE)")
    req = RcpRequest(
        model=get_case(model).name,
        batch=batch_size,
        params=combos[0],
        input_size=input_size,
        runs=runs,
        device="cuda" if device == "cuda" else "cpu",
        threads=threads,
        budget=budget,
        timeout_s=float(timeout),
        store_path=store_path,
        by=by,
        command=command_line("dlbench reference measure-convergence"),
    )
    rcp_specs(req)  # a case without a target, a bad parameter: refused in one line before any progress is drawn
    with RunProgress(runs, Console(stderr=True)) as ui:
        outcome = measure_rcp(req, ui)
    point = outcome.rcp
    text = point.to_yaml()
    name = file_name(point.key)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / name).write_text(text, encoding="utf-8")
        click.echo(f"wrote {Path(out_dir) / name} (run {outcome.run_id})")
    else:
        click.echo(text, nl=False)
    reached = len(point.steps)
    if reached < 5:
        click.echo(f"only {reached} of {len(point.runs)} runs reached the target: not enough to ship", err=True)
