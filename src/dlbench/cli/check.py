"""`dlbench check same-model -m CASE [-f FW,...]`: the canonical weights through every framework's model, compared
with torch's (dlbench.samemodel); the table comes from report/same_model.py.

Exit codes: 0 every framework passed; 1 one failed (its worst tensor named) or broke; 2 bad input; 3 none failed
but some could not be checked (environment missing, case not built: each named).
"""

from __future__ import annotations

import sys

import click

from dlbench.backends import all_backends, get_info
from dlbench.cli.output import stdout_console
from dlbench.report.same_model import same_model_table
from dlbench.samemodel import SameModelRequest, check_same_model
from dlbench.spec import SpecError, parse_count


@click.group("check")
def check() -> None:
    """Check dlbench itself: that every framework trains the same model (same-model)."""


def _frameworks(text: str) -> tuple[str, ...]:
    if text.strip() == "all":
        return tuple(all_backends())
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise SpecError("-f/--framework names no framework: give FW,FW,... or all")
    for name in names:
        get_info(name)  # UnknownFramework: one line, exit 2
    return names


def _params(texts: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    values: dict[str, int] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip() or name.strip() in values:
            raise SpecError(f"--param takes NAME=VALUE, each name once (e.g. vocab=1000); got {text!r}")
        values[name.strip()] = parse_count(value, name.strip())
    return tuple(sorted(values.items()))


@check.command("same-model")
@click.option("--model", "-m", required=True, help="The case (resnet50, bert_base ...).")
@click.option(
    "--framework",
    "-f",
    default="all",
    show_default=True,
    help="Comma-separated frameworks compared with torch, or 'all'; one whose environment is missing is skipped, "
    "named.",
)
@click.option("--batch", default=2, show_default=True, type=click.IntRange(min=2), help="Samples in the batch.")
@click.option(
    "--input-size", type=click.IntRange(min=1), help="Image side or sequence length. Default: 64 px or 32 tokens."
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of weights and batch.")
@click.option(
    "--param", "params", multiple=True, help="A case parameter, NAME=VALUE (repeatable), e.g. vocab=1000 for wide_deep."
)
def same_model(
    model: str, framework: str, batch: int, input_size: int | None, seed: int, params: tuple[str, ...]
) -> int:
    """Load one set of canonical weights into each framework's model, run the forward pass (training and evaluation
    mode) and one plain-SGD step on one batch, and compare logits, loss and the step's change with torch's."""
    request = SameModelRequest(model, _frameworks(framework), _params(params), batch, input_size, seed)
    outcome = check_same_model(request, lambda line: print(line, file=sys.stderr, flush=True))
    stdout_console().print(same_model_table(outcome))
    return outcome.exit_code


__all__ = ["check"]
