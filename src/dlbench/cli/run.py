"""`dlbench run`: measure points now, store them, print the table."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time

import click
from rich.console import Console

from dlbench.cases import get_case
from dlbench.cli.options import build_specs, parse_params, protocol_from, require_gpu, say_device, with_layout
from dlbench.cli.output import stdout_console
from dlbench.cli.progress import RunProgress
from dlbench.cli.watch_options import watch_options
from dlbench.launch.bounds import check_bounds
from dlbench.launch.hosts import HostsConfig
from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.registry import NAMES as LAUNCHER_NAMES
from dlbench.launch.registry import Launchers
from dlbench.launch.session import run_points
from dlbench.report.export import to_csv, to_json
from dlbench.report.max_values import verdict_lines
from dlbench.report.table import COLUMNS, COMPACT, pick_columns, points_table, scaling_notes
from dlbench.report.telemetry import telemetry_notes
from dlbench.machine.env import host_identity, physical_cores
from dlbench.analysis.record import point_result
from dlbench.analysis.scaling import missing_baselines, scaled
from dlbench.records import MIN_REPEATS_FOR_SPREAD, PointResult, exit_code
from dlbench.store.store import Store
from dlbench.spec import PRECISIONS, PRESETS, STRATEGIES, PointSpec, SpecError
from dlbench.suite.maxbatch import param_bounds, search


@click.command("run")
@click.option("--framework", "-f", help="Comma-separated frameworks, or 'all'. Default: torch.")
@click.option("--model", "-m", help="Comma-separated cases. Default: resnet50,bert_base.")
@click.option("--batch-size", "-b", help="Per-device batch size(s), comma-separated. Default: the case's "
              "CPU size on the CPU, its fixed seed size on a GPU.")
@click.option("--precision", "-p", help=f"Comma-separated, from {', '.join(PRECISIONS)}. Default: fp32.")
@click.option("--compile/--no-compile", "compile_", default=False, help="Compile the step (torch.compile, XLA ...).")
@click.option("--channels-last", is_flag=True, help="NHWC memory format for image models.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--preset", "preset_name", type=click.Choice(list(PRESETS)), default="quick", show_default=True,
              help="The seeds' methodology: warm-up, measured steps, repeats, statistic.")
@click.option("--warmup", type=click.IntRange(min=0), help="Override the preset's warm-up steps.")
@click.option("--steps", type=click.IntRange(min=1), help="Override the preset's measured steps.")
@click.option("--repeats", type=click.IntRange(min=1), help="Override the preset's repeats.")
@click.option("--statistic", type=click.Choice(["mean", "median"]), help="Override the statistic over repeats.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=1800.0, show_default=True,
              help="Seconds before a point's worker is stopped and recorded as 'timeout'.")
@click.option("--input-size", type=click.IntRange(min=1), help="Shrink the image side / sequence length (tests).")
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads for every framework. Default: physical cores.")
@click.option("--data", type=click.Choice(["synthetic", "real"]), default="synthetic", show_default=True)
@click.option("--data-dir", type=click.Path(), help="Folder made by `dlbench data` for --data real.")
@click.option("--scale", help="Nodes and devices per node the seeds' way, e.g. 1n2c or 2n8c.")
@click.option("--nodes", type=click.IntRange(min=1), help="Number of nodes.")
@click.option("--devices-per-node", type=click.IntRange(min=1), help="Devices (processes) per node.")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)), default="none", show_default=True,
              help="How gradients meet across devices.")
@click.option("--launcher", help=f"Where points run: {', '.join(LAUNCHER_NAMES)}. Default: local on "
              "1 device; on several, the framework's engine (torchrun for torch), else local.")
@click.option("--hosts", envvar="DLBENCH_HOSTS", help="Comma-separated hosts for several nodes (torchrun, hosts, "
              "mpirun), node 0 first. [env: DLBENCH_HOSTS]")
@click.option("--reach", envvar="DLBENCH_REACH", help="Command that runs a command on {host}. Default: "
              "'ssh -o BatchMode=yes -o ConnectTimeout=10 {host}'. [env: DLBENCH_REACH]")
@click.option("--master-addr", envvar="DLBENCH_MASTER_ADDR", help="Rendezvous address. Default: the first "
              "host. [env: DLBENCH_MASTER_ADDR]")
@click.option("--rendezvous-timeout", envvar="DLBENCH_RDZV_TIMEOUT", type=click.FloatRange(min=0, min_open=True),
              default=300.0, show_default=True, help="Seconds ranks wait for each other. [env: DLBENCH_RDZV_TIMEOUT]")
@click.option("--memory-limit", help="Emulated device memory budget on the CPU, e.g. 8GiB (over it = oom).")
@click.option("--param", "params", multiple=True, help="A case parameter's values, e.g. vocab=3.2M,6.4M (K, M, G "
              "suffixes; each value a point; repeatable), or NAME=max to search the largest that trains.")
@click.option("--tensor-parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Split each layer over T devices (Megatron's column/row split; GPT cases).")
@click.option("--pipeline-parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Split the layers into P pipeline stages (GPT cases). Data parallel = devices / (T x P).")
@click.option("--micro-batches", type=click.IntRange(min=1), default=1, show_default=True,
              help="Micro-batches a pipeline splits each replica's batch into.")
@click.option("--schedule", "pipeline_schedule", type=click.Choice(["1f1b", "gpipe"]), default="1f1b",
              show_default=True, help="The pipeline's schedule.")
@click.option("--recompute", is_flag=True, help="Recompute activations in the backward pass (activation "
              "checkpointing, as DLPerf's GPT runs did).")
@click.option("--sync-every-step", is_flag=True, help="Synchronise with the device after every measured step "
              "(latency studies; part of the point's identity). Default: only at the ends of each timed window.")
@click.option("--bucket-mb", type=click.IntRange(min=1), help="DDP's gradient bucket size in MB (ddp, ddp-fp16, "
              "ddp-bf16, powersgd, replicated-pscpu; part of the point's identity). Default: torch's 25.")
@click.option("--store", "store_path", type=click.Path(), help="Result store. Default: $DLBENCH_STORE or "
              "./dlbench-results/results.db.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="How the finished points are printed (json and csv as `dlbench results` gives them).")
@click.option("--columns", help=f"Table columns, comma-separated, from {', '.join(COLUMNS)}. Default: "
              f"{', '.join(COMPACT)}.")
@click.option("--wide", is_flag=True, help="Every table column (cells may be cut to fit the terminal).")
@click.option("--force", is_flag=True, help="Start more ranks or threads than this machine has GPUs or logical "
              "CPUs (see README, Run it: bounds).")
@watch_options
def run(framework: str | None, model: str | None, batch_size: str | None, precision: str | None,
        compile_: bool, channels_last: bool, device: str, preset_name: str, warmup: int | None,
        steps: int | None, repeats: int | None, statistic: str | None, timeout: float, input_size: int | None,
        threads: int | None, data: str, data_dir: str | None, scale: str | None, nodes: int | None,
        devices_per_node: int | None, strategy: str, launcher: str | None, hosts: str | None, reach: str | None,
        master_addr: str | None, rendezvous_timeout: float, memory_limit: str | None,
        params: tuple[str, ...], tensor_parallel: int, pipeline_parallel: int, micro_batches: int,
        pipeline_schedule: str, recompute: bool, sync_every_step: bool, bucket_mb: int | None, store_path: str | None, fmt: str,
        columns: str | None, wide: bool, force: bool = False, wait_quiet: float = 0.0,
        price_per_hour: float | None = None) -> int:
    """Run benchmark points now (with no options: PyTorch ResNet-50 and BERT-base, preset quick)."""
    shown = pick_columns(columns, wide)
    specs = build_specs(
        framework=framework, model=model, batch_size=batch_size, precision=precision, compile_=compile_,
        channels_last=channels_last, device=device,
        protocol=protocol_from(preset_name, warmup, steps, repeats, statistic), timeout=timeout,
        input_size=input_size, threads=threads, data=data, data_dir=data_dir, scale=scale, nodes=nodes,
        devices_per_node=devices_per_node, strategy=strategy, launcher=launcher or "local", memory_limit=memory_limit,
        params=params)
    specs = with_layout(specs, tensor_parallel, pipeline_parallel, micro_batches, pipeline_schedule, recompute,
                        round_batch=batch_size is None)
    if sync_every_step:
        specs = [dataclasses.replace(s, sync_every_step=True) for s in specs]
    if bucket_mb is not None:  # checked by the spec: only strategies with buckets take it
        specs = [dataclasses.replace(s, bucket_mb=bucket_mb) for s in specs]
    searched = parse_params(params)[1]
    if searched and any(s.device == "cpu" and s.memory_limit_bytes is None for s in specs):
        raise SpecError(f"--param {searched}=max on the CPU needs --memory-limit (the emulated device budget; "
                        "the search must not fill this machine's memory)")
    launchers = Launchers.build(HostsConfig.from_options(hosts, reach, master_addr, rendezvous_timeout))
    if launcher is None:
        specs = [dataclasses.replace(s, launcher=Launchers.default_for(s)) for s in specs]
    for s in specs:
        launchers.check(s)
    require_gpu(specs, hosts)
    check_bounds(specs, force, remote_hosts=bool(launchers.config.hosts))  # no fork bomb from a typo
    for fw in {s.framework for s in specs}:
        interpreter_for(fw)  # refuse a missing framework before anything is written
    store = Store(store_path)
    say_device(device)
    first = specs[0]
    failed: list[PointResult] = []
    extras: dict[str, dict[str, object]] = {}
    if searched:
        specs, failed, extras = search_param(store, specs, searched, launchers)
    # Speedup needs the 1-device throughput of the same configuration: measure it first where the store has none.
    # A model-parallel (or Partial FC) maximum outgrows one device by design: no baseline for it (scaling.py).
    want = [s for s in specs if not (s.key() in extras and get_case(s.model).configured(s.params).splits_model)]
    specs = [*missing_baselines(store.points(), want, host_identity(first.device, physical_cores())), *specs]
    command = "dlbench " + shlex.join(sys.argv[1:]) if sys.argv[0].endswith("dlbench") else "dlbench run"
    run_id = store.create_run(command, kind="run", meta={"preset": preset_name, "points": len(specs) + len(failed)})
    for r in failed:
        store.add_point(run_id, r)
    console = Console(stderr=True)
    try:
        with RunProgress(len(specs), console) as ui:
            results = run_points(store, run_id, specs, launchers, started=ui.started, done=ui.done, extras=extras,
                                 wait_quiet_s=wait_quiet, price_per_hour=price_per_hour)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted")
        raise
    store.finish_run(run_id, "done")
    results = [*failed, *results]
    stored = store.points()
    if fmt != "table":
        mine = [p for p in stored if p.run_id == run_id]
        click.echo(to_json(mine, stored) if fmt == "json" else to_csv(mine, stored), nl=fmt == "json")
        return exit_code(r.status for r in results)
    out = stdout_console()
    scales = [scaled(stored, r) for r in results]
    out.print(points_table(results, title=f"run {run_id}", scaled=scales, columns=shown,
                           width=out.width))
    for line in scaling_notes(results, scales) + verdict_lines(results):
        out.print(line)
    for line in telemetry_notes(results):
        out.print(line)
    n = first.protocol.repeats
    out.print(f"Throughput = global samples in the measured steps / wall time of those steps; "
              f"{first.protocol.statistic} of {n} repeat{'s' if n != 1 else ''}, "
              + ("± half the 95% CI." if n >= MIN_REPEATS_FOR_SPREAD else
                 f"n={n}: fewer than {MIN_REPEATS_FOR_SPREAD} repeats give no CI and no CV (noise unknown)."))
    out.print(f"Results: {store.path} (run {run_id}). Raw step times: dlbench results {run_id} --format json")
    return exit_code(r.status for r in results)


def search_param(store: Store, specs: list[PointSpec], name: str, launchers: Launchers
                 ) -> tuple[list[PointSpec], list[PointResult], dict[str, dict[str, object]]]:
    """--param NAME=max: search each configuration's largest value (suite/maxbatch.py, probes cached), then the
    points to measure at it, and the search's facts to keep with each (by spec key); a configuration where even
    the lower bound fails becomes a failed point."""
    found_specs: list[PointSpec] = []
    failed: list[PointResult] = []
    extras: dict[str, dict[str, object]] = {}
    for spec in specs:
        lo, hi, unit = param_bounds(get_case(spec.model), name)
        found = search(store, spec, lo, hi, memory_limit=spec.memory_limit_bytes,
                       python=interpreter_for(spec.framework), launchers=launchers, quantity=name, unit=unit)
        label = f"{spec.framework} {spec.model} bs{spec.batch_size}"
        if found.max_batch is None:
            click.echo(f"max {name} for {label}: none fits: {found.note}", err=True)
            none = point_result(spec, found.last.status, None, f"no {name} in [{lo}, {hi}) trains: {found.note}",
                                [], time.time())
            failed.append(dataclasses.replace(none, extra={**none.extra, found.extra_key: found.facts()}))
            continue
        how = f"exact within {unit:,}, reproduced when run again" if found.exact else found.note
        over = f", {found.fails_at:,} ran out of memory" if found.fails_at is not None else ""
        click.echo(f"max {name} for {label}: {found.max_batch:,} trains{over} ({how}; {len(found.probes)} probes, "
                   f"{found.new_probes} new)", err=True)
        at_max = dataclasses.replace(spec, case_params=tuple(sorted({**spec.params, name: found.max_batch}.items())))
        found_specs.append(at_max)
        extras[at_max.key()] = {found.extra_key: found.facts()}
    return found_specs, failed, extras
