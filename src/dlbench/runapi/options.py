"""Turning command-line options into validated PointSpecs (shared by run and sweep)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Sequence

import click

from dlbench.backends import all_backends, get_info
from dlbench.cases import get_case
from dlbench.data.layout import check_data_dir
from dlbench.envs.interpreters import state
from dlbench.machine.env import choose_device, cuda_available
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol, SpecError, parse_count, parse_scale, parse_size, preset
from dlbench.suite.maxbatch import search_floor

DEFAULT_MODELS = ("resnet50", "bert_base")
MAX = "max"  # --param NAME=max: search the largest value that trains


def parse_params(texts: Sequence[str]) -> tuple[list[dict[str, int]], str | None]:
    """--param NAME=V1,V2 (repeatable) -> every combination of the values, and the one NAME=max, if any
    (its value is left out of the combinations: the search finds it)."""
    values: dict[str, list[int]] = {}
    searched: str | None = None
    for text in texts:
        name, sep, rest = text.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise SpecError(f"--param takes NAME=VALUE[,VALUE...] (e.g. vocab=3.2M,6.4M or vocab=max); got {text!r}")
        if name in values or name == searched:
            raise SpecError(f"--param {name} is given twice; list its values once, comma-separated")
        if any(not v.strip() for v in rest.split(",")):
            raise SpecError(
                f"--param {name}= lists an empty value ({text!r}): give values separated by single "
                "commas, e.g. vocab=1K,2K"
            )
        items = split(rest, f"--param {name}=")
        if MAX in items:
            if items != [MAX]:
                raise SpecError(f"--param {name}=max searches the value: give it alone, not with other values")
            if searched is not None:
                raise SpecError(f"--param: only one parameter can be searched at a time ({searched} and {name})")
            searched = name
            continue
        values[name] = [parse_count(v, name) for v in items]
        if len(set(values[name])) != len(values[name]):
            raise SpecError(f"--param {name} lists a value twice")
    names = sorted(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))], searched


def split(text: str | None, option: str = "") -> list[str]:
    """'a,b, c' -> ['a', 'b', 'c']; SpecError when an option given (named by `option`) lists nothing."""
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if option and text is not None and not items:
        raise SpecError(f"{option} lists nothing; give at least one value, e.g. {option} a,b")
    return items


def parse_batches(text: str | None) -> list[int] | None:
    """'8,16' -> [8, 16]; None when not given (the case's default applies)."""
    if not text:
        return None
    out = []
    for t in split(text, "--batch-size"):
        if not re.fullmatch(r"-?[0-9]+", t) or int(t) < 1:
            raise SpecError(f"batch size must be a whole number >= 1; got {t!r}")
        out.append(int(t))
    return out


def frameworks(text: str | None) -> list[str]:
    """Framework names; 'all' means every framework installed in some environment (absent ones noted)."""
    names = split(text, "--framework") or ["torch"]
    if names == ["all"]:
        states = [state(b) for b in all_backends()]
        missing = [s.name for s in states if not s.installed and not get_info(s.name).unavailable]
        unusable = [s.name for s in states if get_info(s.name).unavailable]
        notes = [f"{', '.join(missing)} (not installed: run: dlbench setup {' '.join(missing)})"] if missing else []
        notes += [f"{', '.join(unusable)} (not installable on this Python)"] if unusable else []
        if notes:
            click.echo(f"note: --framework all skips {'; '.join(notes)}", err=True)
        found = [s.name for s in states if s.installed]
        if not found:
            raise SpecError("no framework is installed in any environment: run: dlbench setup torch jax ...")
        return found
    for n in names:
        get_info(n)
    return names


def resolve_device(device: str) -> str:
    """'auto' -> cuda where NVML sees a visible GPU, else cpu."""
    return choose_device(device)[0]


def require_gpu(specs: Sequence[PointSpec], hosts: str | None) -> None:
    """--device cuda where NVML sees no GPU on this machine: a SpecError (exit 2, nothing run), so that a CI job
    that lost its GPU fails. Points placed elsewhere (--hosts, Slurm) are left to the machines that run them."""
    here = [s for s in specs if s.device == "cuda" and s.launcher != "slurm"]
    if here and not hosts and not cuda_available():
        why = (
            "CUDA_VISIBLE_DEVICES hides every GPU"
            if os.environ.get("CUDA_VISIBLE_DEVICES") == ""
            else "NVML reports no NVIDIA GPU"
        )
        raise SpecError(f"--device cuda: {why} on this machine; use --device cpu (or auto)")


def say_device(device: str) -> None:
    """For --device auto, one stderr line saying which device was chosen and why (after input was validated)."""
    if device == "auto":
        chosen, why = choose_device(device)
        click.echo(f"device: {chosen} ({why})", err=True)


def build_specs(
    *,
    framework: str | None,
    model: str | None,
    batch_size: str | None,
    precision: str | None,
    compile_: bool,
    channels_last: bool,
    device: str,
    protocol: Protocol,
    timeout: float,
    input_size: int | None,
    threads: int | None,
    data: str,
    data_dir: str | None,
    scale: str | None,
    nodes: int | None,
    devices_per_node: int | None,
    strategy: str,
    launcher: str,
    memory_limit: str | None,
    params: Sequence[str] = (),
) -> list[PointSpec]:
    """Every combination of the comma-separated axes and --param values, validated before anything runs. A
    parameter searched (NAME=max) starts at its case's search floor (suite/maxbatch.py bounds)."""
    dev = resolve_device(device)
    if scale and (nodes is not None or devices_per_node is not None):  # one would silently win over the other
        raise SpecError(
            f"--scale {scale} sets the nodes and devices per node: give it, or --nodes and --devices-per-node, not both"
        )
    n, k = parse_scale(scale) if scale else (nodes or 1, devices_per_node or 1)
    batches = parse_batches(batch_size)
    limit = parse_size(memory_limit) if memory_limit else None
    specs: list[PointSpec] = []
    precisions: Sequence[str] = split(precision, "--precision") or ["fp32"]
    models = split(model, "--model") or DEFAULT_MODELS
    combos, searched = parse_params(params)
    for fw, name, prec, values in itertools.product(frameworks(framework), models, precisions, combos):
        case = get_case(name)
        if searched is not None:
            values = {**values, searched: search_floor(case, searched)}
        # a parameter the case does not declare, or a value it refuses; an input size it cannot take: SpecError
        case.configured(values).check_input_size(input_size)
        for bs in batches or [case.batch_cpu if dev == "cpu" else case.batch_fixed]:
            specs.append(
                PointSpec(
                    framework=fw,
                    model=case.name,
                    batch_size=bs,
                    protocol=protocol,
                    precision=prec,  # type: ignore[arg-type]
                    compile=compile_,
                    channels_last=channels_last,
                    device=dev,  # type: ignore[arg-type]
                    data=data,  # type: ignore[arg-type]
                    data_dir=data_dir,
                    input_size=input_size,
                    nodes=n,
                    devices_per_node=k,
                    strategy=strategy,
                    launcher=launcher,
                    timeout_s=timeout,
                    memory_limit_bytes=limit,
                    threads=threads,
                    case_params=tuple(sorted(values.items())),
                )
            )
    for spec in specs:
        check_data_dir(spec, get_case(spec.model))
    return specs


def protocol_from(
    preset_name: str, warmup: int | None, steps: int | None, repeats: int | None, statistic: str | None
) -> Protocol:
    """The named preset with any CLI overrides applied."""
    return preset(preset_name).override(warmup=warmup, steps=steps, repeats=repeats, statistic=statistic)


def with_layout(
    specs: list[PointSpec],
    tensor: int,
    pipeline: int,
    micro_batches: int,
    schedule: str,
    recompute: bool,
    round_batch: bool = False,
) -> list[PointSpec]:
    """The specs with a parallel layout (--tensor-parallel ...); a layout the devices cannot take: SpecError.
    `round_batch` (no --batch-size given): the case's default batch rounded up to whole micro-batches."""
    out = []
    for s in specs:
        batch = -(-s.batch_size // micro_batches) * micro_batches if round_batch else s.batch_size
        out.append(
            dataclasses.replace(
                s,
                batch_size=batch,
                layout=Layout(
                    tensor_parallel=tensor,
                    pipeline_parallel=pipeline,
                    micro_batches=micro_batches,
                    schedule=schedule,
                    recompute=recompute,
                ),
            )
        )
    return out
