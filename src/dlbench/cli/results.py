"""`dlbench results`: recent runs and their points as a table, JSON (with raw step times) or tidy CSV."""

from __future__ import annotations

import click

from dlbench.analysis.scaling import scaled
from dlbench.analysis.verify import verify as verify_points
from dlbench.cli.numbers import AsciiIntRange
from dlbench.cli.output import stdout_console
from dlbench.report.export import to_csv, to_json
from dlbench.report.table import COLUMNS, COMPACT, pick_columns, points_table, runs_table, scaling_notes
from dlbench.store.errors import StoreError
from dlbench.store.store import Store


@click.command("results")
@click.argument("run_ids", nargs=-1)
@click.option(
    "--last", type=AsciiIntRange(min=1), default=5, show_default=True, help="With no RUN_ID: how many recent runs."
)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
@click.option(
    "--verify",
    is_flag=True,
    help="Re-derive every point's metrics from its raw samples and report "
    "any that differ from the stored ones (exit 1).",
)
@click.option(
    "--recover",
    is_flag=True,
    help="Read the store's recovery files (points it could not take when "
    "written) back into it; reading twice adds nothing.",
)
@click.option(
    "--columns", help=f"Table columns, comma-separated, from {', '.join(COLUMNS)}. Default: {', '.join(COMPACT)}."
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every table column; speedup and samples/kWh, optional, are otherwise left "
    "out where the terminal is narrow (and the runs table's 'created'). Outside a terminal: full width.",
)
def results(
    run_ids: tuple[str, ...],
    last: int,
    fmt: str,
    store_path: str | None,
    verify: bool,
    recover: bool,
    columns: str | None,
    wide: bool,
) -> int:
    """Show stored runs and points (RUN_ID prefixes work)."""
    shown = pick_columns(columns, wide)
    if recover:
        return recover_points(store_path)
    store = Store(store_path, readonly=True)
    runs = [store.get_run(r) for r in run_ids] if run_ids else store.runs(limit=last)
    if verify:
        return verify_runs(store, [r.id for r in runs])
    points = store.points([r.id for r in runs])
    every = store.points()  # a speedup's 1-device point may come from any run
    if fmt == "json":
        click.echo(to_json(points, every))
    elif fmt == "csv":
        click.echo(to_csv(points, every), nl=False)
    else:
        out = stdout_console(wide)
        out.print(runs_table(runs, wide=wide))
        for r in runs:
            mine = [p.result for p in points if p.run_id == r.id]
            if not mine:
                continue
            scales = [scaled(every, p) for p in mine] if any(p.spec.world_size > 1 for p in mine) else None
            out.print(points_table(mine, title=f"run {r.id}", scaled=scales, columns=shown, wide=wide, width=out.width))
            for line in scaling_notes(mine, scales or []):
                out.print(line)
    return 0


def verify_runs(store: Store, run_ids: list[str]) -> int:
    """Check each point's stored metrics against its raw samples; 1 when any differs."""
    points = store.points(run_ids)
    bad = verify_points(points, store.stored_rows(run_ids))
    for m in bad:
        click.echo(f"MISMATCH run {m.run_id} point {m.uid} ({m.label}): " + "; ".join(m.problems), err=True)
    click.echo(
        f"verified {len(points)} point(s) of {len(run_ids)} run(s) against their raw samples: {len(bad)} mismatch(es)"
    )
    return 1 if bad else 0


def recover_points(store_path: str | None) -> int:
    """Read recovery files back into the store and say what happened."""
    store = Store.open(store_path, recover=True)
    r = store.recovered
    if not r.files and r.errors:  # a recovery file it could not read (a FIFO in its place ...): say so, exit 2
        raise StoreError(r.errors[0])
    if not r.files:
        click.echo(f"no recovery file for {store.path} (looked at {', '.join(map(str, store.recovery_paths))})")
        return 0
    click.echo(
        f"recovered {r.added} point(s) into {store.path} from {', '.join(map(str, r.files))}; "
        f"{r.present} were already there; {r.failed} could not be written to the store"
        + (f"; {r.quarantined} unreadable line(s) moved to a quarantine file beside it" if r.quarantined else "")
    )
    for e in r.errors[:3]:
        click.echo(f"  {e}", err=True)
    if not r.failed:
        click.echo("every recovered point is in the store: the recovery file(s) can be deleted")
    return 1 if r.failed else 0
