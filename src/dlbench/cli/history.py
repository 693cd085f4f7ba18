"""`dlbench history`: each configuration's throughput over time and framework versions, change points flagged.

Exit codes: 0; 1 with --fail-on-regression when a newest point regressed; 2 bad input; 6 when a configuration's
newest point was measured under contention (inconclusive: no verdict on it) and nothing exited 1; 3 when a
comparison's samples could not have shown a change ('not enough samples') and nothing exited 1 or 6.
"""

from __future__ import annotations

import click

from dlbench.analysis.compare import ALPHA, MIN_EFFECT
from dlbench.analysis.history import Series, build_series, parse_since
from dlbench.backends import get_info
from dlbench.cases import get_case
from dlbench.cli.compare import CONTENDED_EXIT, parse_percent
from dlbench.cli.output import stdout_console
from dlbench.cli.values import split
from dlbench.jsonout import strict_dumps
from dlbench.report.change_tables import HISTORY_OPTIONAL, history_table
from dlbench.store.store import Store


def _known(model: str | None, framework: str | None) -> tuple[list[str], list[str]]:
    """The named cases (aliases resolved) and frameworks; UnknownCase / UnknownFramework for a name dlbench lacks."""
    models = [get_case(m).name for m in split(model, "--model")]
    frameworks = split(framework, "--framework")
    for fw in frameworks:
        get_info(fw)
    return models, frameworks


def _as_json(series: list[Series]) -> str:
    return strict_dumps(
        [
            {
                "label": s.label,
                "framework": s.framework,
                "model": s.model,
                "hardware": s.hardware,
                "points": [
                    {
                        "run_id": hp.point.run_id,
                        "uid": hp.point.uid,
                        "finished": hp.point.result.finished,
                        "status": hp.point.result.status,
                        "versions": hp.versions,
                        "throughput": hp.point.result.metrics.throughput if hp.point.result.metrics else None,
                        "ratio_vs_segment_start": hp.comparison.ratio if hp.comparison else None,
                        "p_value": hp.comparison.p_value if hp.comparison else None,
                        "change": hp.change,
                        "undetectable": hp.comparison.note if hp.undetectable and hp.comparison else None,
                        "contended": hp.contended or None,
                    }
                    for hp in s.points
                ],
            }
            for s in series
        ],
        indent=2,
    )


@click.command("history")
@click.option("--model", "-m", help="Comma-separated cases. Default: all.")
@click.option("--framework", "-f", help="Comma-separated frameworks. Default: all.")
@click.option("--since", help="Only points from this long ago on, e.g. 30d, 12h, 2w.")
@click.option(
    "--min-effect",
    default=f"{MIN_EFFECT:.0%}",
    show_default=True,
    help="Smallest change that can be called a regression or an improvement.",
)
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 1 when the newest point of a configuration is a significant regression.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--store", "store_path", help="Result store (a file or postgresql://user@host/db).")
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(HISTORY_OPTIONAL)} are left out where the "
    "terminal is too narrow); outside a terminal, print the table at its full width.",
)
def history(
    model: str | None,
    framework: str | None,
    since: str | None,
    min_effect: str,
    fail_on_regression: bool,
    fmt: str,
    store_path: str | None,
    wide: bool = False,
) -> int:
    """Throughput of each configuration over time and framework versions; regressions and improvements are
    called with the test `dlbench compare` uses."""
    try:
        start = parse_since(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    effect = parse_percent(min_effect)
    store = Store(store_path, readonly=True)
    models, frameworks = _known(model, framework)
    points = store.points(models=models, frameworks=frameworks, since=start)
    if not points:
        raise click.UsageError(f"no points in {store.path} for these models, frameworks and --since")
    series = build_series(points, effect)
    if fmt == "json":
        click.echo(_as_json(series))
    else:
        _print_table(series, len(points), effect, wide)
    return _exit_code(series, fail_on_regression)


def _print_table(series: list[Series], points: int, effect: float, wide: bool) -> None:
    """The history table and one line that counts configurations, points, change points and what had no verdict."""
    out = stdout_console(wide)
    out.print(history_table(series, wide=wide))
    found = [(s, hp) for s in series for hp in s.changes]
    blind = sum(len(s.undetectable) for s in series)
    noisy_points = sum(bool(hp.contended) for s in series for hp in s.points)
    out.print(
        f"{len(series)} configuration(s), {points} point(s); {len(found)} change point(s)"
        + (f", and {blind} comparison(s) whose samples could not have shown one (not enough samples)" if blind else "")
        + (f", {noisy_points} point(s) measured under contention (no verdict)" if noisy_points else "")
        + ". "
        f"Each point is compared with its segment's first point (the series' first, or the last "
        f"change): p < {ALPHA}, the 95% CI excludes 1 and the change is at least {effect:.0%}.",
        highlight=False,
    )


def _exit_code(series: list[Series], fail_on_regression: bool) -> int:
    """Say on stderr what regressed, what had no verdict (contended) and what could not have shown a change; the
    exit code: 1 for a regression with --fail-on-regression, CONTENDED_EXIT, 3 for blind comparisons, else 0."""
    regressed = [s for s in series if s.latest_regressed]
    if regressed:
        click.echo(
            f"{len(regressed)} configuration(s) regressed in their newest point: "
            + ", ".join(s.label for s in regressed),
            err=True,
        )
        if fail_on_regression:
            return 1
    noisy = [s for s in series if s.latest_contended]
    if noisy:
        click.echo(
            f"inconclusive: {len(noisy)} configuration(s) have a newest point measured under contention, so no "
            f"verdict on it (exit {CONTENDED_EXIT}): " + ", ".join(s.label for s in noisy),
            err=True,
        )
        return CONTENDED_EXIT
    blind_points = [(s, hp) for s in series for hp in s.undetectable]
    if blind_points:
        click.echo(
            f"{len(blind_points)} comparison(s) could not have shown a change, e.g. {blind_points[0][0].label}"
            f" in run {blind_points[0][1].point.run_id}: "
            f"{blind_points[0][1].comparison.note if blind_points[0][1].comparison else ''}",
            err=True,
        )
        return 3
    return 0
