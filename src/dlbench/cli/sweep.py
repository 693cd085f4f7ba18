"""`dlbench sweep SUITE|FILE`: run a suite's matrix unattended into one resumable run; --dry-run lists it (the sweep
API is runapi/sweep.py)."""

from __future__ import annotations

import click
from rich.console import Console

from dlbench.cli.feedback import say_busy, say_device
from dlbench.cli.invocation import command_line
from dlbench.cli.output import stdout_console
from dlbench.cli.progress import RunProgress, describe
from dlbench.cli.values import as_kept_frameworks, as_only, as_size
from dlbench.cli.watch_options import watch_options
from dlbench.report.listing import suites_table
from dlbench.report.sweep import maxbatch_table, plan_notes, plan_table, sweep_table
from dlbench.runapi.run import LAUNCHER_NAMES
from dlbench.runapi.sweep import (
    PlannedSweep,
    SweepHooks,
    SweepOutcome,
    SweepRequest,
    execute_sweep,
    prepare_sweep,
)
from dlbench.suite import builtin_names, load


def _print_plan(planned: PlannedSweep) -> None:
    """A dry run's plan: its points with the max batches the store holds, and its notes."""
    out = stdout_console()
    out.print(plan_table(planned.suite, planned.planned, planned.found, planned.settings))
    for line in plan_notes(planned.suite, planned.planned, planned.settings):
        out.print(line)


def _print_outcome(outcome: SweepOutcome) -> None:
    """The sweep's table, its max batch searches, and one line that says where its points are kept."""
    results = list(outcome.results)
    out = stdout_console()
    out.print(sweep_table(results, title=f"sweep {outcome.suite.name}: run {outcome.run_id}", width=out.width))
    if outcome.searches:
        out.print(maxbatch_table(outcome.searches, results, outcome.bases))
    failed = sum(r.status != "ok" for r in results)
    out.print(
        f"{len(results)} points ({failed} not ok: each says why) in {outcome.elapsed_s:,.0f} s this "
        f"session. Results: {outcome.store_path} (run {outcome.run_id}); show them with: dlbench results "
        f"{outcome.run_id}"
    )


@click.command("sweep")
@click.argument("suite_name", required=False, metavar="SUITE|FILE")
@click.option("--resume", "resume_id", help="Run only the points this sweep run lacks (its suite is stored with it).")
@click.option("--dry-run", is_flag=True, help="List the points (and stored max batches) and run nothing.")
@click.option(
    "--only",
    multiple=True,
    metavar="AXIS=V[,V]",
    help="Keep only these values of an axis (repeatable), e.g. --only framework=torch --only scale=1n1c.",
)
@click.option(
    "--framework",
    "-f",
    help="Comma-separated frameworks to keep, as in `run` (shorthand for --only "
    "framework=...; 'all' keeps the suite's).",
)
@click.option(
    "--device",
    type=click.Choice(["suite", "auto", "cpu", "cuda"]),
    default="suite",
    show_default=True,
    help="Override the suite's device.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    help="Real data made by `dlbench data`. Default: generated beside the store as the suite's real_data says.",
)
@click.option(
    "--memory-limit", help="Emulated device budget of max-batch probes on the CPU, e.g. 8GiB (overrides the suite's)."
)
@click.option(
    "--launcher",
    type=click.Choice(["auto", *LAUNCHER_NAMES]),
    help="Override the suite's launcher, e.g. slurm to run every point as a Slurm job.",
)
@click.option("--list", "list_suites", is_flag=True, help="List the built-in suites.")
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
@click.option(
    "--skip-impossible",
    is_flag=True,
    help="Skip (and name) the points the spec shows cannot run "
    "(docs/refusals.md); without it such a point refuses the whole suite before anything runs.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Start more ranks or threads than this machine has GPUs or logical CPUs (see docs/measuring.md, Bounds).",
)
@watch_options
def sweep(
    suite_name: str | None,
    resume_id: str | None,
    dry_run: bool,
    only: tuple[str, ...],
    framework: str | None,
    device: str,
    data_dir: str | None,
    memory_limit: str | None,
    launcher: str | None,
    list_suites: bool,
    store_path: str | None,
    force: bool = False,
    skip_impossible: bool = False,
    wait_quiet: float = 0.0,
    price_per_hour: float | None = None,
) -> int:
    """Run a suite (built-in name or YAML file) as one resumable run; Ctrl-C keeps every finished point."""
    if list_suites:
        stdout_console().print(suites_table([(name, load(name).title) for name in builtin_names()]))
        return 0
    command = command_line(f"dlbench sweep {suite_name}") if suite_name else None
    console = Console(stderr=True)
    prepared = prepare_sweep(
        SweepRequest(
            suite_name=suite_name,
            resume_id=resume_id,
            dry_run=dry_run,
            only=as_only(only),
            frameworks=as_kept_frameworks(framework),
            device=device,
            data_dir=data_dir,
            memory_limit=as_size(memory_limit),
            launcher=launcher,
            store_path=store_path,
            force=force,
            skip_impossible=skip_impossible,
            wait_quiet=wait_quiet,
            price_per_hour=price_per_hour,
            command=command,
        ),
        note=console.print,
    )
    if isinstance(prepared, PlannedSweep):
        _print_plan(prepared)
        return 0
    if not resume_id:
        say_device(prepared.suite.device if device == "suite" else device)
    outcome = execute_sweep(
        prepared,
        SweepHooks(
            note=console.print,
            progress=lambda total: RunProgress(total, console),
            starting=lambda: say_busy(console, wait_quiet, prepared.suite.threads),
        ),
    )
    _print_outcome(outcome)
    return outcome.exit_code


__all__ = ["describe", "sweep"]
