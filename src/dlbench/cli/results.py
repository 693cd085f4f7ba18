"""`dlbench results`: recent runs and their points as a table, JSON (with raw step times) or tidy CSV."""

from __future__ import annotations

import click

from dlbench.cli.output import stdout_console
from dlbench.report.export import to_csv, to_json
from dlbench.report.table import points_table, runs_table, scaling_notes
from dlbench.results.scaling import scaled
from dlbench.results.store import Store


@click.command("results")
@click.argument("run_ids", nargs=-1)
@click.option("--last", type=click.IntRange(min=1), default=5, show_default=True,
              help="With no RUN_ID: how many recent runs.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
def results(run_ids: tuple[str, ...], last: int, fmt: str, store_path: str | None) -> None:
    """Show stored runs and points (RUN_ID prefixes work)."""
    store = Store(store_path, readonly=True)
    runs = [store.get_run(r) for r in run_ids] if run_ids else store.runs(limit=last)
    points = store.points([r.id for r in runs])
    every = store.points()  # a speedup's 1-device point may come from any run
    if fmt == "json":
        click.echo(to_json(points, every))
    elif fmt == "csv":
        click.echo(to_csv(points, every), nl=False)
    else:
        out = stdout_console()
        out.print(runs_table(runs))
        for r in runs:
            mine = [p.result for p in points if p.run_id == r.id]
            if not mine:
                continue
            scales = [scaled(every, p) for p in mine] if any(p.spec.world_size > 1 for p in mine) else None
            out.print(points_table(mine, title=f"run {r.id}", scaled=scales))
            for line in scaling_notes(mine, scales or []):
                out.print(line)
