"""`dlbench compare RUN_A RUN_B`: per matching point, the ratio B/A with a CI and an honest verdict.

Exit codes: 0 compared (no regression over --fail-above); 1 a significant regression over --fail-above; 2 bad
input; 3 a point's samples could not have shown the change asked about ('not enough samples', machine/power.py)
and no regression was found.
"""

from __future__ import annotations

import re

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dlbench.analysis.compare import FASTER, MIN_EFFECT, SLOWER, UNDETECTABLE, Comparison, PointComparison, compare_runs
from dlbench.store.store import Store

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")
_STYLE = {FASTER: "green", SLOWER: "red"}
UNDETECTABLE_EXIT = 3


def parse_percent(text: str) -> float:
    """'5%' or '5' -> 0.05."""
    m = _PERCENT.match(text)
    if not m:
        raise click.BadParameter(f"must look like 5% or 2.5%; got {text!r}")
    return float(m.group(1)) / 100


def comparison_table(c: Comparison) -> Table:
    """One row per matching point: throughputs, ratio with its CI, p-value and verdict."""
    t = Table(title=f"B = {c.run_b} vs A = {c.run_a}")
    for col, justify in (("configuration", "left"), ("A samples/s", "right"), ("B samples/s", "right"),
                         ("B/A", "right"), ("95% CI", "right"), ("p", "right"), ("MFU A → B", "right")):
        t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    t.add_column("verdict", no_wrap=True)
    for p in c.points:
        ta = f"{p.throughput_a:,.1f}" if p.throughput_a is not None else p.status_a
        tb = f"{p.throughput_b:,.1f}" if p.throughput_b is not None else p.status_b
        ratio = f"{p.ratio:.3f}" if p.ratio is not None else "-"
        ci = f"{p.ci_low:.3f} - {p.ci_high:.3f}" if p.ci_low is not None and p.ci_high is not None else "-"
        pv = f"{p.p_value:.2g}" if p.p_value is not None else "-"
        style = _STYLE.get(p.verdict, "yellow" if p.verdict == UNDETECTABLE else "")
        text = p.verdict + (f" ({p.change:+.1%})" if p.verdict in _STYLE and p.change is not None else "")
        # 'not enough samples to detect 5%: need 9 per side'; the reason follows the table (`undetectable_lines`)
        short = p.note.split(" (have")[0]
        text = escape(short if p.verdict == UNDETECTABLE else text + (f" ({p.note})" if p.note else ""))
        t.add_row(escape(p.label), ta, tb, ratio, ci, pv, _mfu(p), f"[{style}]{text}[/]" if style else text)
    return t


def undetectable_lines(c: Comparison) -> list[str]:
    """One line per point whose samples could not have shown the change asked about, with the reason."""
    return [f"{p.label}: {p.note}" for p in c.undetectable()]


def _mfu(p: PointComparison) -> str:
    """'41.0% → 40.2%'; 'above peak' or 'peak unknown' for a side without an MFU, '-' for one not measured."""
    def one(mfu: float | None, peak: str) -> str:
        if mfu is not None:
            return f"{mfu:.1%}"
        return "above peak" if peak.endswith("; above peak") else "peak unknown" if peak.startswith("peak unknown") \
            else "-"
    return f"{one(p.mfu_a, p.peak_a)} → {one(p.mfu_b, p.peak_b)}"


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--fail-above", help="Exit 1 when a point is significantly slower in B by more than this, e.g. 5%; "
              "exit 3 when a point's samples have under 80% power to detect it.")
@click.option("--min-effect", default=f"{MIN_EFFECT:.0%}", show_default=True,
              help="Smallest change that can be called faster or slower.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
def compare(run_a: str, run_b: str, fail_above: str | None, min_effect: str, fmt: str,
            store_path: str | None) -> int:
    """Compare run B with run A point by point (RUN_ID prefixes work)."""
    threshold = parse_percent(fail_above) if fail_above is not None else None
    effect = parse_percent(min_effect)
    store = Store(store_path, readonly=True)
    a, b = store.get_run(run_a), store.get_run(run_b)
    c = compare_runs(a.id, store.points([a.id]), b.id, store.points([b.id]), min_effect=effect, target=threshold)
    err = Console(stderr=True)
    for w in c.warnings:
        err.print(f"[bold yellow]warning:[/] {escape(w)}", highlight=False)
    if fmt == "json":
        click.echo(c.to_json())
    else:
        out = Console()
        out.print(comparison_table(c))
        if c.only_a:
            out.print(f"Only in A ({len(c.only_a)}): {', '.join(c.only_a)}", highlight=False)
        if c.only_b:
            out.print(f"Only in B ({len(c.only_b)}): {', '.join(c.only_b)}", highlight=False)
        for line in undetectable_lines(c):
            out.print(escape(line), highlight=False)
        out.print(f"Method: {c.method}.", highlight=False)
    if threshold is not None:
        bad = c.regressions(threshold)
        if bad:
            err.print(f"[bold red]{len(bad)} significant regression(s) over {threshold:.1%}:[/] "
                      + ", ".join(f"{p.label} ({p.change:+.1%})" for p in bad if p.change is not None),
                      highlight=False)
            return 1
    blind = c.undetectable()
    if blind:
        err.print(f"[bold yellow]{len(blind)} point(s) could not have shown the change asked about:[/] "
                  + escape("; ".join(undetectable_lines(c))), highlight=False)
        return UNDETECTABLE_EXIT
    return 0
