"""`dlbench run`'s options as one typed RunRequest: each option read by its parser (cli/values.py) into the
request's axes and shared settings, once, so that the command copies no option by hand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlbench.cli.values import (
    Frameworks,
    as_batches,
    as_device,
    as_frameworks,
    as_layout,
    as_models,
    as_params,
    as_precisions,
    as_protocol,
    as_scale,
    as_size,
)
from dlbench.points import Axes, Shared
from dlbench.runapi.run import RunRequest, hosts_config


def run_request(options: Mapping[str, Any], command: str) -> tuple[RunRequest, Frameworks]:
    """The request `dlbench run`'s options (by their parameter names) say, and the frameworks it names (with the
    note `--framework all` prints); a SpecError (one line) for a value that cannot be read."""
    o = options
    frameworks = as_frameworks(o["framework"])
    lora = o.get("lora")  # --lora R is --param lora=R (cases/lora.py)
    combos, searched = as_params((*o["params"], f"lora={lora}") if lora else o["params"])
    nodes, per_node = as_scale(o["scale"], o["nodes"], o["devices_per_node"])
    axes = Axes(
        frameworks=frameworks.names,
        models=as_models(o["model"]),
        precisions=as_precisions(o["precision"]),
        batches=as_batches(o["batch_size"]),
        params=combos,
        searched=searched,
    )
    shared = Shared(
        protocol=as_protocol(o["preset_name"], o["warmup"], o["steps"], o["repeats"], o["statistic"]),
        device=as_device(o["device"]),
        compile=o["compile_"],
        channels_last=o["channels_last"],
        data=o["data"],
        data_dir=o["data_dir"],
        input_size=o["input_size"],
        nodes=nodes,
        devices_per_node=per_node,
        strategy=o["strategy"],
        launcher=o["launcher"],
        timeout_s=o["timeout"],
        memory_limit_bytes=as_size(o["memory_limit"]),
        threads=o["threads"],
        sync_every_step=o["sync_every_step"],
        layout=as_layout(o),
        converge=o["converge"],
        converge_steps=o["converge_steps"],
        converge_target=o["converge_target"],
        converge_runs=o["converge_runs"],
        converge_reference=o["converge_reference"],
        seed=o["seed"],
    )
    request = RunRequest(
        axes=axes,
        shared=shared,
        hosts=hosts_config(o["hosts"], o["reach"], o["master_addr"], o["rendezvous_timeout"]),
        store_path=o["store_path"],
        force=o["force"],
        wait_quiet=o["wait_quiet"],
        price_per_hour=o["price_per_hour"],
        command=command,
    )
    return request, frameworks


__all__ = ["run_request"]
