"""The command line's text values as typed ones, parsed at the edge: each function reads one option (or a few that
say one thing together) and returns what the run API takes, or raises a one-line SpecError (exit 2)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click

from dlbench.backends import all_backends, get_info
from dlbench.cases import get_case
from dlbench.cli.numbers import AsciiIntRange
from dlbench.envs.interpreters import state
from dlbench.machine.env import choose_device
from dlbench.parallel import Layout, option_fields
from dlbench.points import DEFAULT_MODELS
from dlbench.spec import (
    PRECISIONS,
    Device,
    Precision,
    Protocol,
    SpecError,
    parse_count,
    parse_scale,
    parse_size,
    preset,
    release_label,
    split_release,
)

MAX = "max"  # --param NAME=max: search the largest value that trains
F = TypeVar("F", bound=Callable[..., object])


def split(text: str | None, option: str = "") -> list[str]:
    """'a,b, c' -> ['a', 'b', 'c']; SpecError when an option given (named by `option`) lists nothing."""
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if option and text is not None and not items:
        raise SpecError(f"{option} lists nothing; give at least one value, e.g. {option} a,b")
    return items


@dataclass(frozen=True)
class Frameworks:
    """--framework's names, and for `all` the line saying which it skips ('' for none)."""

    names: tuple[str, ...]
    note: str = ""


def as_frameworks(text: str | None) -> Frameworks:
    """Framework names (default torch), each maybe with its release (jax==0.10.1: that release's environment);
    'all' means every framework installed in some environment."""
    names = split(text, "--framework") or ["torch"]
    if names != ["all"]:
        parsed = [split_release(n) for n in names]
        for name, _ in parsed:
            get_info(name)
        return Frameworks(tuple(release_label(name, release) for name, release in parsed))
    states = [state(b) for b in all_backends()]
    missing = [s.name for s in states if not s.installed and not get_info(s.name).unavailable]
    unusable = [s.name for s in states if get_info(s.name).unavailable]
    notes = [f"{', '.join(missing)} (not installed: run: dlbench setup {' '.join(missing)})"] if missing else []
    notes += [f"{', '.join(unusable)} (not installable on this Python)"] if unusable else []
    found = tuple(s.name for s in states if s.installed)
    note = f"note: --framework all skips {'; '.join(notes)}" if notes else ""
    if not found:
        raise SpecError("no framework is installed in any environment: run: dlbench setup torch jax ...")
    return Frameworks(found, note)


def as_models(text: str | None) -> tuple[str, ...]:
    """Case names (default ResNet-50 and BERT-base), each a registered case."""
    return tuple(get_case(name).name for name in split(text, "--model") or DEFAULT_MODELS)


def as_batches(text: str | None) -> tuple[int, ...]:
    """'8,16' -> (8, 16); () when not given (each case's default applies)."""
    out = []
    for t in split(text, "--batch-size") if text else []:
        if not re.fullmatch(r"-?[0-9]+", t) or int(t) < 1:
            raise SpecError(f"batch size must be a whole number >= 1; got {t!r}")
        out.append(int(t))
    return tuple(out)


def as_precisions(text: str | None) -> tuple[Precision, ...]:
    """'fp32,bf16' -> ('fp32', 'bf16'); default fp32."""
    names = split(text, "--precision") or ["fp32"]
    for name in names:
        if name not in PRECISIONS:
            raise SpecError(f"precision must be one of {', '.join(PRECISIONS)}; got {name!r}")
    return tuple(cast(Precision, n) for n in names)


def as_params(texts: Sequence[str]) -> tuple[tuple[Mapping[str, int], ...], str | None]:
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
    combos = tuple(dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names)))
    return combos, searched


def as_scale(scale: str | None, nodes: int | None, devices_per_node: int | None) -> tuple[int, int]:
    """(nodes, devices per node) from --scale 1n2c, or --nodes and --devices-per-node (default 1 and 1)."""
    if scale and (nodes is not None or devices_per_node is not None):  # one would silently win over the other
        raise SpecError(
            f"--scale {scale} sets the nodes and devices per node: give it, or --nodes and --devices-per-node, not both"
        )
    return parse_scale(scale) if scale else (nodes or 1, devices_per_node or 1)


def as_size(text: str | None) -> int | None:
    """'8GiB' -> bytes; None when not given."""
    return parse_size(text) if text else None


def as_only(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """('scale=1n1c', 'framework=torch,tf') -> {'scale': ('1n1c',), 'framework': ('torch', 'tf')}."""
    from dlbench.suite.schema import AXES  # the suite format (YAML, pydantic): only sweep asks, not run's path

    out: dict[str, list[str]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or axis.strip() not in AXES or not values.strip():
            raise click.UsageError(
                f"--only takes AXIS=VALUE[,VALUE...] with an axis of {', '.join(AXES)}; got {item!r}"
            )
        out.setdefault(axis.strip(), []).extend(v.strip() for v in values.split(",") if v.strip())
    return {axis: tuple(values) for axis, values in out.items()}


def as_kept_frameworks(text: str | None) -> tuple[str, ...]:
    """sweep --framework: the frameworks of the suite to keep; () for none given or `all` (the suite's)."""
    return () if not text or text.strip() == "all" else tuple(split(text))


def as_device(text: str) -> Device:
    """'auto' -> cuda where NVML sees a visible GPU, else cpu; cpu and cuda as they are."""
    return cast(Device, choose_device(text)[0])


def as_protocol(
    preset_name: str, warmup: int | None, steps: int | None, repeats: int | None, statistic: str | None
) -> Protocol:
    """The named preset with any overrides applied."""
    return preset(preset_name).override(warmup=warmup, steps=steps, repeats=repeats, statistic=statistic)


def as_layout(options: Mapping[str, Any]) -> Layout:
    """The parallel layout the layout options (layout_options) say; the spec checks it against the devices."""
    return Layout(**{f.name: options[f.name] for f in option_fields()})


def layout_options(fn: F) -> F:
    """Add one option per layout field (`--tensor-parallel` ... `--bucket-mb`), made from parallel.Layout: its
    name, its type, its default, the values it takes and its help."""
    for f in reversed(option_fields()):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata["help"]
        if isinstance(f.default, bool):
            fn = click.option(flag, is_flag=True, help=help_text)(fn)
        elif f.metadata["choices"]:
            choices = click.Choice(list(f.metadata["choices"]))
            fn = click.option(flag, type=choices, default=f.default, show_default=True, help=help_text)(fn)
        elif f.default is None:
            fn = click.option(flag, type=AsciiIntRange(min=1), help=help_text)(fn)
        else:
            fn = click.option(flag, type=AsciiIntRange(min=1), default=f.default, show_default=True, help=help_text)(fn)
    return fn


__all__ = [
    "Frameworks",
    "as_batches",
    "as_device",
    "as_frameworks",
    "as_layout",
    "as_models",
    "as_params",
    "as_precisions",
    "as_protocol",
    "as_scale",
    "as_size",
    "layout_options",
    "split",
]
