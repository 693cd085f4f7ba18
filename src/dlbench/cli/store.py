"""`dlbench store push|pull`: copy runs between a local store and a team's shared one, idempotently."""

from __future__ import annotations

import click

from dlbench.store.gather import Copied, copy_runs
from dlbench.store.store import Store


def _say(verb: str, c: Copied, src: Store, dst: Store) -> None:
    click.echo(
        f"{verb} {src.path} -> {dst.path}: {c.runs_added} new run(s), {c.runs_updated} run status "
        f"update(s), {c.points_added} new point(s), {c.points_present} already there"
    )


@click.group("store")
def store_cmd() -> None:
    """Share results: copy runs to and from another store (a PostgreSQL server or a SQLite file)."""


@store_cmd.command("push")
@click.argument("run_ids", nargs=-1)
@click.option("--to", "to_url", required=True, help="The target store: postgresql://user@host/db or a file.")
@click.option("--all", "all_runs", is_flag=True, help="Every run of the local store.")
@click.option("--store", "store_path", help="The local store. Default: $DLBENCH_STORE or ./dlbench-results/results.db.")
def push(run_ids: tuple[str, ...], to_url: str, all_runs: bool, store_path: str | None) -> None:
    """Copy runs (RUN_ID prefixes work) with every point to another store; copying again adds nothing."""
    if not run_ids and not all_runs:
        raise click.UsageError("name the runs to push, or --all")
    src = Store(store_path, readonly=True)
    ids = [src.get_run(r).id for r in run_ids]  # an unknown run fails before the target is opened or made
    dst = Store.open(to_url, recover=True)  # a writer: first what an earlier one could not store
    _say("pushed", copy_runs(src, dst, ids), src, dst)


@store_cmd.command("pull")
@click.argument("run_ids", nargs=-1)
@click.option("--from", "from_url", required=True, help="The store to copy from: postgresql://user@host/db or a file.")
@click.option("--all", "all_runs", is_flag=True, help="Every run of that store.")
@click.option("--store", "store_path", help="The local store. Default: $DLBENCH_STORE or ./dlbench-results/results.db.")
def pull(run_ids: tuple[str, ...], from_url: str, all_runs: bool, store_path: str | None) -> None:
    """Copy runs (RUN_ID prefixes work) with every point from another store into the local one."""
    if not run_ids and not all_runs:
        raise click.UsageError("name the runs to pull, or --all")
    src = Store(from_url, readonly=True)
    ids = [src.get_run(r).id for r in run_ids]  # an unknown run fails before the target is opened or made
    dst = Store.open(store_path, recover=True)
    _say("pulled", copy_runs(src, dst, ids), src, dst)
