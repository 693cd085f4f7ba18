"""`dlbench compare RUN_A RUN_B`: per matching point, the ratio B/A with a CI and an honest verdict. `dlbench compare
--by version [RUN ...]`: each configuration's change from one framework release to the next (analysis/versions.py),
with the same verdicts and exit codes.

Exit codes: 0 compared (no regression over --fail-above); 1 a significant regression over --fail-above; 2 bad
input; 3 a point's samples could not have shown the change asked about ('not enough samples', analysis/statistical_power.py)
and no regression was found; 6 a point has no verdict because a side was measured under contention (inconclusive:
measure again on a quiet machine), and no regression was found; 5 the runs share no configuration.
"""

from __future__ import annotations

import re

import click
from rich.console import Console
from rich.markup import escape

from dlbench.analysis.compare import MIN_EFFECT, Comparison, compare_runs
from dlbench.analysis.versions import compare_versions
from dlbench.cli.output import stdout_console
from dlbench.report.change_tables import COMPARE_OPTIONAL, comparison_table, contended_lines, undetectable_lines
from dlbench.store.store import Store

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$", re.ASCII)
UNDETECTABLE_EXIT = 3
NOTHING_COMPARED_EXIT = 5  # the runs share no configuration: a CI gate must not pass having compared nothing
CONTENDED_EXIT = 6  # inconclusive: a side of some point was measured under contention, so it has no verdict


def parse_percent(text: str) -> float:
    """'5%' or '5' -> 0.05."""
    m = _PERCENT.match(text)
    if not m:
        raise click.BadParameter(f"must look like 5% or 2.5%; got {text!r}")
    return float(m.group(1)) / 100


def _comparison(store: Store, runs: tuple[str, ...], by: str, effect: float, threshold: float | None) -> Comparison:
    """Two runs compared point by point, or (by version) the releases of each configuration in the runs given."""
    if by == "version":
        ids = [store.get_run(r).id for r in runs] or [r.id for r in store.runs(limit=1)]
        if not ids:
            raise click.UsageError(f"compare --by version: the store {store.path} holds no run")
        return compare_versions(store.points(ids), min_effect=effect, target=threshold)
    if len(runs) != 2:
        raise click.UsageError(f"compare takes two runs, RUN_A RUN_B (got {len(runs)}); --by version takes any number")
    a, b = store.get_run(runs[0]), store.get_run(runs[1])
    return compare_runs(a.id, store.points([a.id]), b.id, store.points([b.id]), min_effect=effect, target=threshold)


@click.command("compare")
@click.argument("runs", nargs=-1)
@click.option(
    "--by",
    type=click.Choice(["run", "version"]),
    default="run",
    show_default=True,
    help="run: RUN_B against RUN_A; version: each configuration's change between consecutive framework releases "
    "among the points of the runs given (the newest run when none).",
)
@click.option(
    "--fail-above",
    help="Exit 1 when a point is significantly slower in B by more than this, e.g. 5%; "
    "exit 3 when a point's samples have under 80% power to detect it. Exit 6 when a point has no verdict because "
    "a side was measured under contention; exit 5 (always) when the runs share no configuration.",
)
@click.option(
    "--min-effect",
    default=f"{MIN_EFFECT:.0%}",
    show_default=True,
    help="Smallest change that can be called faster or slower.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(COMPARE_OPTIONAL)} are left out where the "
    "terminal is too narrow); outside a terminal, print the table at its full width.",
)
def compare(
    runs: tuple[str, ...],
    by: str,
    fail_above: str | None,
    min_effect: str,
    fmt: str,
    store_path: str | None,
    wide: bool = False,
) -> int:
    """Compare run B with run A point by point (RUN_ID prefixes work), or each configuration's releases (--by version).

    RUN_A RUN_B by run; with --by version, any number of runs (the newest when none), each configuration's
    consecutive framework releases among their points."""
    threshold = parse_percent(fail_above) if fail_above is not None else None
    effect = parse_percent(min_effect)
    c = _comparison(Store(store_path, readonly=True), runs, by, effect, threshold)
    err = Console(stderr=True)
    for w in c.warnings:
        err.print(f"[bold yellow]warning:[/] {escape(w)}", highlight=False)
    if fmt == "json":
        click.echo(c.to_json())
    else:
        _print_table(c, by, wide)
    return _exit_code(c, by, threshold, err)


def _print_table(c: Comparison, by: str, wide: bool) -> None:
    """The comparison table, what only one side measured, what had no verdict, and the method."""
    out = stdout_console(wide)
    out.print(comparison_table(c, wide=wide))
    if c.only_a:
        where = "Measured at one release only" if by == "version" else "Only in A"
        out.print(f"{where} ({len(c.only_a)}): {', '.join(c.only_a)}", highlight=False)
    if c.only_b:
        out.print(f"Only in B ({len(c.only_b)}): {', '.join(c.only_b)}", highlight=False)
    for line in undetectable_lines(c) + contended_lines(c):
        out.print(escape(line), highlight=False)
    out.print(f"Method: {c.method}.", highlight=False)


def _exit_code(c: Comparison, by: str, threshold: float | None, err: Console) -> int:
    """Say on stderr why the comparison is not a pass; the exit code: NOTHING_COMPARED_EXIT, 1 for a regression
    over --fail-above, CONTENDED_EXIT, UNDETECTABLE_EXIT, else 0."""
    if not c.points:
        what = (
            "no configuration was measured at two framework releases"
            if by == "version"
            else f"runs {escape(c.run_a)} and {escape(c.run_b)} share no configuration"
        )
        err.print(f"[bold red]nothing compared:[/] {what} (exit 5)", highlight=False)
        return NOTHING_COMPARED_EXIT
    if threshold is not None:
        bad = c.regressions(threshold)
        if bad:
            err.print(
                f"[bold red]{len(bad)} significant regression(s) over {threshold:.1%}:[/] "
                + ", ".join(f"{p.label} ({p.change:+.1%})" for p in bad if p.change is not None),
                highlight=False,
            )
            return 1
    noisy = c.contended()
    if noisy:
        err.print(
            f"[bold yellow]inconclusive: {len(noisy)} point(s) have no verdict, measured under contention[/] "
            f"(exit {CONTENDED_EXIT}; measure again on a quiet machine, or with --wait-quiet): "
            + escape("; ".join(f"{p.label} ({p.contended})" for p in noisy)),
            highlight=False,
        )
        return CONTENDED_EXIT
    blind = c.undetectable()
    if blind:
        err.print(
            f"[bold yellow]{len(blind)} point(s) could not have shown the change asked about:[/] "
            + escape("; ".join(undetectable_lines(c))),
            highlight=False,
        )
        return UNDETECTABLE_EXIT
    return 0
