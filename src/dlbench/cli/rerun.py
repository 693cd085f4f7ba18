"""`dlbench rerun RUN`: measure a stored run's exact configurations again, here, and compare with the original.

The answer to "I cannot reproduce your number": every distinct spec of the run's points (frozen PointSpecs, read
back from the store) is measured again in this environment, stored as a new run (kind `rerun`, its meta naming
the original), and compared point by point with the original through analysis/compare.py. Identity keys that
differ between the two (device, framework version ...) are named first, since they explain a difference before
any statistics do.
"""

from __future__ import annotations

import shlex
import sys

import click
from rich.console import Console
from rich.markup import escape

from dlbench.analysis.compare import MIN_EFFECT, Comparison
from dlbench.cli.compare import parse_percent
from dlbench.cli.output import stdout_console
from dlbench.cli.progress import RunProgress
from dlbench.records import exit_code
from dlbench.report.change_tables import comparison_table, contended_lines, undetectable_lines
from dlbench.runapi.again import rerun as measure_rerun
from dlbench.store.store import Store


def identity_lines(c: Comparison) -> list[str]:
    """The identity keys that differ between the original and the rerun, one line each, or one line saying none."""
    if not c.identity_diffs:
        return ["identity keys: the same as the original's (device, CPU, framework version, threads ...)"]
    return [
        f"identity key {k} differs: {', '.join(a)} (original) -> {', '.join(b)} (rerun)"
        for k, (a, b) in c.identity_diffs.items()
    ]


@click.command("rerun")
@click.argument("run_id")
@click.option(
    "--min-effect",
    default=f"{MIN_EFFECT:.0%}",
    show_default=True,
    help="Smallest change that can be called faster or slower.",
)
@click.option("--store", "store_path", type=click.Path(), help="Result store (the rerun is stored in it too).")
@click.option(
    "--force",
    is_flag=True,
    help="Start more ranks or threads than this machine has GPUs or logical CPUs, as run --force does.",
)
def rerun(run_id: str, min_effect: str, store_path: str | None, force: bool = False) -> int:
    """Measure RUN's configurations again here, store them as a new run and compare it with RUN."""
    effect = parse_percent(min_effect)
    store = Store.open(store_path, recover=True)
    command = "dlbench " + shlex.join(sys.argv[1:]) if sys.argv[0].endswith("dlbench") else f"dlbench rerun {run_id}"
    done = measure_rerun(
        store, run_id, command, force, effect, progress=lambda total: RunProgress(total, Console(stderr=True))
    )
    c, new_id = done.comparison, done.new_id
    out = stdout_console()
    out.print(
        f"rerun {new_id} of run {done.original} ({done.configurations} configuration(s), measured here)",
        highlight=False,
    )
    for line in identity_lines(c):
        out.print(escape(line), highlight=False)
    for w in c.warnings:
        if not w.startswith("identity keys differ"):  # named above, key by key
            out.print(f"[bold yellow]warning:[/] {escape(w)}", highlight=False)
    out.print(comparison_table(c))
    for line in undetectable_lines(c) + contended_lines(c):
        out.print(escape(line), highlight=False)
    out.print(f"Method: {c.method}.", highlight=False)
    out.print(
        f"Results: {store.path} (run {new_id}). `dlbench compare {done.original} {new_id}` compares them again.",
        highlight=False,
    )
    return exit_code(r.status for r in done.results)
