"""`dlbench bisect -f jax --versions 0.9.0..0.11.0 -m CASE ...`: which framework release changed a configuration's
speed. It takes run's options for the one configuration (runapi/bisect.py measures; analysis/bisect.py halves).

Exit codes: 0 the change located between two neighbouring releases, or none between the ends; 2 bad input (a
release not set up at an end included); 3 the halving stopped before locating it (a verdict it needed could not be
drawn: not enough samples, a failed point, a release not set up, a change the other way), saying why; 6 it stopped
at a point measured under contention (measure again on a quiet machine, or with --wait-quiet).
"""

from __future__ import annotations

from typing import Any

import click

from dlbench.analysis.bisect import Bisection, most_probes
from dlbench.analysis.compare import CONTENDED, MIN_EFFECT, PointComparison
from dlbench.cli.compare import parse_percent
from dlbench.cli.feedback import say_device
from dlbench.cli.invocation import command_line
from dlbench.cli.run import run as run_command
from dlbench.cli.run_request import run_request
from dlbench.report.digits import fmt_rate
from dlbench.runapi.bisect import SOURCES, BisectHooks, BisectOutcome, BisectRequest, execute_bisect, prepare_bisect

STOPPED_EXIT = 3
CONTENDED_EXIT = 6
# run's options bisect does not take: it prints lines, not a table, and measures throughput, not convergence
NOT_TAKEN = frozenset({"framework", "fmt", "columns", "wide", "lora", "converge", "converge_steps", "converge_target"})


def _figures(c: PointComparison | None) -> str:
    if c is None or c.throughput_a is None or c.throughput_b is None or c.ratio is None:
        return ""
    ci = f", 95% CI {c.ci_low:.3f}-{c.ci_high:.3f}" if c.ci_low is not None and c.ci_high is not None else ""
    return f"{fmt_rate(c.throughput_a)} -> {fmt_rate(c.throughput_b)} samples/s ({c.ratio - 1:+.1%}{ci})"


def outcome_lines(outcome: BisectOutcome) -> list[str]:
    """What a finished bisection found, one line each: where, with both figures; or why it stopped."""
    b: Bisection = outcome.bisection
    fw, first, last = outcome.framework, b.releases[0], b.releases[-1]
    read = len(b.probes) - b.measured
    lines = []
    if b.located:
        lines.append(f"{fw}: {b.direction} between {b.before} and {b.after}: {_figures(b.change)}")
    elif not b.direction and not b.stopped:
        lines.append(f"{fw}: no significant change from {first} to {last}: {_figures(b.ends)}; nothing to locate")
    else:
        where = f" (so far: between {b.before} and {b.after})" if b.direction else ""
        lines.append(f"{fw}: stopped{where}: {b.stopped}")
        if b.ends is not None and b.ends.ratio is not None:
            lines.append(f"{fw} {first} -> {last}: {b.ends.verdict}, {_figures(b.ends)}")
    stored = f" (run {outcome.run_id})" if outcome.run_id else ""
    lines.append(
        f"Measured {b.measured} point(s){stored}, read {read} from the store; the halving of {len(b.releases)} "
        f"releases ({outcome.source_note}) reads at most {most_probes(len(b.releases))}."
    )
    return lines


def exit_code(b: Bisection) -> int:
    """0 located or no change between the ends; 6 stopped at a contended point; 3 stopped otherwise."""
    if not b.stopped:
        return 0
    return CONTENDED_EXIT if CONTENDED in b.stopped else STOPPED_EXIT


def _bisect(framework: str, versions: str, source: str, min_effect: str, fresh: bool, **options: Any) -> int:
    """Find the framework release that made one configuration slower (or faster), halving the releases between two."""
    options.update(framework=framework, converge=False, converge_steps=None, converge_target=None)
    run_req, _ = run_request(options, command_line("dlbench bisect"))
    request = BisectRequest(run_req, versions, source, parse_percent(min_effect), fresh)
    prepared = prepare_bisect(request)
    click.echo(
        f"bisect {framework} over {len(prepared.releases)} releases ({prepared.source_note}): "
        f"{', '.join(prepared.releases)}",
        err=True,
    )
    say_device(options["device"])
    outcome = execute_bisect(prepared, BisectHooks(note=lambda line: click.echo(line, err=True)))
    for line in outcome_lines(outcome):
        click.echo(line)
    return exit_code(outcome.bisection)


OWN = [
    click.Option(["--framework", "-f"], required=True, help="The one framework whose releases are halved, e.g. jax."),
    click.Option(
        ["--versions"],
        required=True,
        help="The releases: A..B (every release between them, from --releases) or a list a,b,c, oldest first.",
    ),
    click.Option(
        ["--releases", "source"],
        type=click.Choice(list(SOURCES)),
        default="set-up",
        show_default=True,
        help="Where A..B's releases come from: set-up (the environments `dlbench setup jax==X` made) or index "
        "(the package index; each release visited must then be set up).",
    ),
    click.Option(
        ["--min-effect"],
        default=f"{MIN_EFFECT:.0%}",
        show_default=True,
        help="Smallest change that can be called faster or slower.",
    ),
    click.Option(["--fresh"], is_flag=True, help="Measure every release visited, even one the store holds."),
]

bisect = click.Command(
    "bisect",
    callback=_bisect,
    params=[*OWN, *(p for p in run_command.params if p.name not in NOT_TAKEN)],
    help="Find the framework release that changed one configuration's speed, halving the releases between two "
    "(run's options say the configuration; releases already measured are read from the store).",
)

__all__ = ["bisect", "exit_code", "outcome_lines"]
