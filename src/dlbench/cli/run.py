"""`dlbench run`: measure points now, store them, print the table (the run API is runapi/run.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from dlbench.analysis.convergence import convergence_lines
from dlbench.analysis.convergence_runs import group_lines
from dlbench.cli.feedback import interrupted_line, say_busy, say_device
from dlbench.cli.invocation import command_line
from dlbench.cli.numbers import AsciiFloatRange, AsciiIntRange, ThreadsOption
from dlbench.cli.output import stdout_console
from dlbench.cli.progress import RunProgress
from dlbench.cli.run_request import run_request
from dlbench.cli.values import layout_options
from dlbench.cli.watch_options import watch_options
from dlbench.records import MIN_REPEATS_FOR_SPREAD
from dlbench.report.export import to_csv, to_json
from dlbench.report.largest_trainable import verdict_lines
from dlbench.report.table import COLUMNS, COMPACT, pick_columns, points_table, scaling_notes
from dlbench.report.telemetry import telemetry_notes
from dlbench.runapi.run import LAUNCHER_NAMES, RunHooks, RunRequest, execute_run, prepare_run
from dlbench.spec import CONVERGE_REFERENCES, PRECISIONS, PRESETS, STRATEGIES


@click.command("run")
@click.option("--framework", "-f", help="Comma-separated frameworks, or 'all'. Default: torch.")
@click.option("--model", "-m", help="Comma-separated cases. Default: resnet50,bert_base.")
@click.option(
    "--batch-size",
    "-b",
    help="Per-device batch size(s), comma-separated. Default: the case's "
    "CPU size on the CPU, its fixed seed size on a GPU.",
)
@click.option("--precision", "-p", help=f"Comma-separated, from {', '.join(PRECISIONS)}. Default: fp32.")
@click.option("--compile/--no-compile", "compile_", default=False, help="Compile the step (torch.compile, XLA ...).")
@click.option("--channels-last", is_flag=True, help="NHWC memory format for image models.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--preset",
    "preset_name",
    type=click.Choice(list(PRESETS)),
    default="quick",
    show_default=True,
    help="The seeds' methodology: warm-up, measured steps, repeats, statistic.",
)
@click.option("--warmup", type=AsciiIntRange(min=0), help="Override the preset's warm-up steps.")
@click.option("--steps", type=AsciiIntRange(min=1), help="Override the preset's measured steps.")
@click.option("--repeats", type=AsciiIntRange(min=1), help="Override the preset's repeats.")
@click.option("--statistic", type=click.Choice(["mean", "median"]), help="Override the statistic over repeats.")
@click.option(
    "--timeout",
    type=AsciiFloatRange(min=0, min_open=True),
    default=1800.0,
    show_default=True,
    help="Seconds before a point's worker is stopped and recorded as 'timeout'.",
)
@click.option("--input-size", type=AsciiIntRange(min=1), help="Shrink the image side / sequence length (tests).")
@click.option(
    "--threads",
    type=ThreadsOption(),
    default="auto",
    show_default=True,
    help="CPU threads for every framework: auto gives each CPU point the physical cores others leave free, "
    "measured just before it (at least 1; docs/measuring.md, Contention).",
)
@click.option("--data", type=click.Choice(["synthetic", "real"]), default="synthetic", show_default=True)
@click.option("--data-dir", type=click.Path(), help="Folder made by `dlbench data` for --data real.")
@click.option("--scale", help="Nodes and devices per node the seeds' way, e.g. 1n2c or 2n8c.")
@click.option("--nodes", type=AsciiIntRange(min=1), help="Number of nodes.")
@click.option("--devices-per-node", type=AsciiIntRange(min=1), help="Devices (processes) per node.")
@click.option(
    "--strategy",
    type=click.Choice(list(STRATEGIES)),
    default="none",
    show_default=True,
    help="How gradients meet across devices.",
)
@click.option(
    "--launcher",
    help=f"Where points run: {', '.join(LAUNCHER_NAMES)}. Default: local on "
    "1 device; on several, the framework's engine (torchrun for torch), else local.",
)
@click.option(
    "--hosts",
    envvar="DLBENCH_HOSTS",
    help="Comma-separated hosts for several nodes (torchrun, hosts, mpirun), node 0 first. [env: DLBENCH_HOSTS]",
)
@click.option(
    "--reach",
    envvar="DLBENCH_REACH",
    help="Command that runs a command on {host}. Default: "
    "'ssh -o BatchMode=yes -o ConnectTimeout=10 {host}'. [env: DLBENCH_REACH]",
)
@click.option(
    "--master-addr",
    envvar="DLBENCH_MASTER_ADDR",
    help="Rendezvous address. Default: the first host. [env: DLBENCH_MASTER_ADDR]",
)
@click.option(
    "--rendezvous-timeout",
    envvar="DLBENCH_RDZV_TIMEOUT",
    type=AsciiFloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Seconds ranks wait for each other. [env: DLBENCH_RDZV_TIMEOUT]",
)
@click.option("--memory-limit", help="Emulated device memory budget on the CPU, e.g. 8GiB (over it = oom).")
@click.option(
    "--param",
    "params",
    multiple=True,
    help="A case parameter's values, e.g. vocab=3.2M,6.4M (K, M, G "
    "suffixes; each value a point; repeatable), or NAME=max to search the largest that trains.",
)
@click.option(
    "--lora",
    type=AsciiIntRange(min=1),
    help="LoRA fine-tuning at this rank (llama cases): the model frozen, low-rank adapters trained; alpha, dropout "
    "and targets are --param lora_alpha=, lora_dropout= (percent), lora_targets= (docs/mlperf.md).",
)
@layout_options
@click.option(
    "--sync-every-step",
    is_flag=True,
    help="Synchronise with the device after every measured step "
    "(latency studies; part of the point's identity). Default: only at the ends of each timed window.",
)
@click.option(
    "--converge",
    is_flag=True,
    help="Train learnable data to the case's target first, evaluate the weights on held-out data in a fresh "
    "process, and judge the steps against the shipped reference convergence points (docs/convergence.md).",
)
@click.option("--converge-steps", type=int, help="Step budget of --converge. Default: the case's.")
@click.option("--converge-target", type=float, help="Target loss of --converge. Default: the case's.")
@click.option(
    "--converge-runs",
    type=AsciiIntRange(min=1),
    default=1,
    show_default=True,
    help="Runs per convergence configuration (seeds --seed .. --seed + N - 1), scored together the MLPerf way.",
)
@click.option(
    "--converge-reference",
    type=click.Choice(list(CONVERGE_REFERENCES)),
    default="shipped",
    show_default=True,
    help="Judge against the shipped reference points (reference runs measured here only where none matches), or "
    "measure local reference runs and check them against the shipped points.",
)
@click.option(
    "--seed",
    type=AsciiIntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the initialisation and, with --converge, of the stream of examples.",
)
@click.option(
    "--store",
    "store_path",
    type=click.Path(),
    help="Result store. Default: $DLBENCH_STORE or ./dlbench-results/results.db.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="How the finished points are printed (json and csv as `dlbench results` gives them).",
)
@click.option(
    "--columns", help=f"Table columns, comma-separated, from {', '.join(COLUMNS)}. Default: {', '.join(COMPACT)}."
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every table column; speedup and samples/kWh, optional, are otherwise left "
    "out where the terminal is narrow. Outside a terminal: the table at its full width.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Start more ranks or threads than this machine has GPUs or logical CPUs, or a point whose memory estimate "
    "cannot fit (docs/measuring.md, Bounds; docs/memory.md).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the points, each one's memory estimate per device and what would refuse it; run nothing.",
)
@watch_options
def run(fmt: str, columns: str | None, wide: bool, dry_run: bool, **options: Any) -> int:
    """Run benchmark points now (with no options: PyTorch ResNet-50 and BERT-base, preset quick)."""
    shown = pick_columns(columns, wide)
    command = command_line("dlbench run")
    request, frameworks = run_request(options, command)
    if frameworks.note:
        click.echo(frameworks.note, err=True)
    if dry_run:
        return _dry_run(request)
    prepared = prepare_run(request)
    say_device(options["device"])
    console = Console(stderr=True)
    outcome = execute_run(
        prepared,
        RunHooks(
            note=lambda line: click.echo(line, err=True),
            progress=lambda total: RunProgress(total, console),
            starting=lambda: say_busy(console, request.wait_quiet, options["threads"]),
            interrupted=lambda run_id: console.print(interrupted_line(run_id, command), highlight=False, markup=False),
        ),
    )
    if fmt != "table":
        stored = list(outcome.stored)
        click.echo(
            to_json(outcome.mine(), stored) if fmt == "json" else to_csv(outcome.mine(), stored), nl=fmt == "json"
        )
        return outcome.exit_code
    results = list(outcome.results)
    out = stdout_console(wide)
    scales = outcome.scales()
    out.print(
        points_table(results, title=f"run {outcome.run_id}", scaled=scales, columns=shown, wide=wide, width=out.width)
    )
    for line in (
        scaling_notes(results, scales) + verdict_lines(results) + convergence_lines(results) + group_lines(results)
    ):
        out.print(line)
    for line in telemetry_notes(results):
        out.print(line)
    n = outcome.protocol.repeats
    out.print(
        f"Throughput = global samples in the measured steps / wall time of those steps; "
        f"{outcome.protocol.statistic} of {n} repeat{'s' if n != 1 else ''}, "
        + (
            "± half the 95% CI."
            if n >= MIN_REPEATS_FOR_SPREAD
            else f"n={n}: fewer than {MIN_REPEATS_FOR_SPREAD} repeats give no CI and no CV (noise unknown)."
        )
    )
    where = outcome.store_path.resolve() if isinstance(outcome.store_path, Path) else outcome.store_path
    out.print(
        f"Results: {where} (run {outcome.run_id}; --store or $DLBENCH_STORE picks another store). Raw step times: "
        f"dlbench results {outcome.run_id} --format json",
        highlight=False,
    )
    return outcome.exit_code


def _dry_run(request: RunRequest) -> int:
    """The points, their memory estimates and what would refuse them; nothing run, nothing written."""
    from dlbench.report.plan import plan_lines, plan_table
    from dlbench.runapi.plan import plan_run

    planned = plan_run(request)
    out = stdout_console()
    out.print(plan_table(planned))
    for line in plan_lines(planned):
        out.print(line, highlight=False, markup=False)
    return 0
