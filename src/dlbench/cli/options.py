"""Turning command-line options into validated PointSpecs (shared by run and sweep)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import click

from dlbench.backends import all_backends, get_info
from dlbench.cases import get_case
from dlbench.data.layout import check_data_dir
from dlbench.launch.interpreters import state
from dlbench.results.env import choose_device
from dlbench.spec import PointSpec, Protocol, SpecError, parse_scale, parse_size, preset

DEFAULT_MODELS = ("resnet50", "bert_base")


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
        if not re.fullmatch(r"-?\d+", t) or int(t) < 1:
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
        notes = ([f"{', '.join(missing)} (not installed: run: dlbench setup {' '.join(missing)})"] if missing else [])
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


def say_device(device: str) -> None:
    """For --device auto, one stderr line saying which device was chosen and why (after input was validated)."""
    if device == "auto":
        chosen, why = choose_device(device)
        click.echo(f"device: {chosen} ({why})", err=True)


def build_specs(*, framework: str | None, model: str | None, batch_size: str | None, precision: str | None,
                compile_: bool, channels_last: bool, device: str, protocol: Protocol, timeout: float,
                input_size: int | None, threads: int | None, data: str, data_dir: str | None,
                scale: str | None, nodes: int | None, devices_per_node: int | None, strategy: str,
                launcher: str, memory_limit: str | None) -> list[PointSpec]:
    """Every combination of the comma-separated axes, validated before anything runs."""
    dev = resolve_device(device)
    n, k = parse_scale(scale) if scale else (nodes or 1, devices_per_node or 1)
    batches = parse_batches(batch_size)
    limit = parse_size(memory_limit) if memory_limit else None
    specs: list[PointSpec] = []
    precisions: Sequence[str] = split(precision, "--precision") or ["fp32"]
    models = split(model, "--model") or DEFAULT_MODELS
    for fw, name, prec in itertools.product(frameworks(framework), models, precisions):
        case = get_case(name)
        for bs in batches or [case.batch_cpu if dev == "cpu" else case.batch_fixed]:
            specs.append(PointSpec(
                framework=fw, model=case.name, batch_size=bs, protocol=protocol, precision=prec,  # type: ignore[arg-type]
                compile=compile_, channels_last=channels_last, device=dev, data=data,  # type: ignore[arg-type]
                data_dir=data_dir, input_size=input_size, nodes=n, devices_per_node=k, strategy=strategy,
                launcher=launcher, timeout_s=timeout, memory_limit_bytes=limit, threads=threads))
    for spec in specs:
        check_data_dir(spec, get_case(spec.model))
    return specs


def protocol_from(preset_name: str, warmup: int | None, steps: int | None, repeats: int | None,
                  statistic: str | None) -> Protocol:
    """The named preset with any CLI overrides applied."""
    return preset(preset_name).override(warmup=warmup, steps=steps, repeats=repeats, statistic=statistic)
