"""The options of `run` and `sweep` about the machine around each point: --wait-quiet and --price-per-hour."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import click

from dlbench.cli.numbers import AsciiFloatRange
from dlbench.machine.telemetry import CONTENTION_SHARE

F = TypeVar("F", bound=Callable[..., object])
MAX_WAIT_S = 7 * 86400.0  # a week: longer is a typo (1e30 would wait until killed)
MAX_PRICE = 1e9  # per device-hour in any currency: larger is a typo, and overflows the costs derived from it


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number; got {value}", ctx=ctx, param=param)
    most = MAX_WAIT_S if param.name == "wait_quiet" else MAX_PRICE
    if value is not None and value > most:
        raise click.BadParameter(f"must be at most {most:g}; got {value:g}", ctx=ctx, param=param)
    return value


def watch_options(fn: F) -> F:
    """Add --wait-quiet SECONDS and --price-per-hour PRICE to a command."""
    fn = click.option(
        "--price-per-hour",
        type=AsciiFloatRange(min=0, min_open=True),
        callback=_finite,
        metavar="PRICE",
        help="What one device (a GPU; on the CPU, the machine) costs per hour, in any currency: each point then "
        "shows its cost per million samples.",
    )(fn)
    fn = click.option(
        "--wait-quiet",
        type=AsciiFloatRange(min=0),
        callback=_finite,
        default=0.0,
        metavar="SECONDS",
        help=f"Before each point, wait up to SECONDS for a quiet machine (other processes using at most "
        f"{CONTENTION_SHARE:.0%} of the CPUs over a second, the point's GPUs free); then run anyway and "
        "record that it waited in vain.",
    )(fn)
    return fn


__all__ = ["watch_options"]
