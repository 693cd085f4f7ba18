"""`dlbench reproduce POINT_OR_RUN`: the command, package lock and host that made a stored point; --env-file writes
the lock as a requirements file; --run measures it again here and shows both side by side with compare's verdict.
The logic lives in analysis/reproduce.py (finding, what is missing, the lock, the version check) and
runapi/again.py (checking this environment, gating, measuring again, comparing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dlbench.analysis.compare import CONTENDED, MIN_EFFECT, PointComparison, contention_of, label
from dlbench.analysis.reproduce import (
    NotReproducible,
    Target,
    command_of,
    find,
    host_facts,
    labels,
    requirements_text,
    what_is_missing,
)
from dlbench.cli.compare import comparison_table, parse_percent, undetectable_lines
from dlbench.cli.invocation import command_line
from dlbench.cli.output import stdout_console
from dlbench.cli.progress import RunProgress
from dlbench.cli.rerun import identity_lines
from dlbench.printable import printable
from dlbench.records import PointResult, exit_code
from dlbench.report.change_tables import contended_lines
from dlbench.report.digits import fmt_rate, fmt_spread
from dlbench.report.files import OutputError, check_output, write_atomic
from dlbench.runapi.again import check_environment, measure_again
from dlbench.store.request import UID_SHOWN, Request, UnreadableRequest, request_of
from dlbench.store.store import Store, StoredPoint


def _say(out: Console, text: str) -> None:
    """One line of stored text (a command, an interpreter's path, a package's name), its control characters
    escaped: a store from elsewhere cannot move the cursor or clear the screen."""
    out.print(escape(printable(text)), highlight=False, soft_wrap=True)


def host_table(result: PointResult, title: str = "host") -> Table:
    """What the host was: two columns, each value whole (folded, never cut)."""
    t = Table(title=title, show_header=False)
    t.add_column("key", no_wrap=True, style="bold")
    t.add_column("value", overflow="fold")
    for k, v in host_facts(result):
        t.add_row(k, escape(printable(v)))
    return t


def show(out: Console, target: Target) -> None:
    """Print what made the point (or each point of the run): command, what is missing, host, package lock."""
    first = target.points[0] if target.points else None
    if target.point is not None:
        p = target.point
        _say(out, f"point {p.uid} ({label(p.result)}, {p.result.status}) of run {target.run.id} ({target.run.kind})")
    else:
        _say(out, f"run {target.run.id} ({target.run.kind}, {len(target.points)} point(s), {target.run.status})")
        for line in labels(target.points):
            _say(out, f"  {line}")
    _say(out, f"command: {command_of(first, target.run) if first else target.run.command}")
    req = request_of(first.result) if first else None
    if req is not None and req.suite:
        _say(out, f"suite: {req.suite}, point {req.suite_point}")
    if req is not None and req.forced:
        _say(out, f"forced: {req.forced}")
    if first is None:
        return
    gone = what_is_missing(first, target.run)
    if gone:
        _say(
            out,
            f"missing: {'; '.join(gone)} (stored by an older dlbench, or never known): shown below is what "
            "its run and its record hold",
        )
    hosts = {tuple(host_facts(p.result)[:4]) for p in target.points}
    out.print(host_table(first.result, "host" if len(hosts) == 1 else "host (of the first point; others differ)"))
    for python, (who, lock) in _locks(target.points).items():
        _say(
            out,
            f"package lock of {python or 'an unknown interpreter'} (Python {lock.python_version or '?'}; "
            f"{who}): {len(lock.packages)} packages",
        )
        for name, version in lock.packages:
            _say(out, f"  {name}=={version}")


def _locks(found: tuple[StoredPoint, ...]) -> dict[str, tuple[str, Request]]:
    """Each distinct interpreter's lock, with the frameworks it ran."""
    out: dict[str, tuple[str, Request]] = {}
    for p in found:
        req = request_of(p.result)
        if req is None or not req.packages:
            continue
        who, _ = out.get(req.python, ("", req))
        names = [w for w in who.split(", ") if w]
        if p.result.spec.framework not in names:
            names.append(p.result.spec.framework)
        out[req.python] = (", ".join(names), req)
    return out


def readable(target: Target) -> Target:
    """The target, once every point's stored request reads (a tampered one: one line naming the point and the
    field, before anything is shown)."""
    for p in target.points:
        try:
            request_of(p.result)
        except UnreadableRequest as exc:
            raise NotReproducible(f"point {p.uid[:UID_SHOWN]}: {exc}") from None
    return target


def check_env_file(path: str) -> None:
    """NotReproducible (one line, exit 2) unless --env-file names a file dlbench may write (report -o's rules)."""
    file = Path(path)
    if not file.parent.is_dir():
        raise NotReproducible(f"cannot write {file}: its folder {file.parent} does not exist")
    try:
        check_output(file)
    except OutputError as exc:
        raise NotReproducible(f"--env-file: {exc}") from None


def write_env_file(target: Target, path: str) -> str:
    """Write the lock of the target's (first) point as a requirements file; the one-line message for the user."""
    locks = _locks(target.points)
    if not locks:
        raise NotReproducible(
            f"{target.name} has no package lock (stored before dlbench kept one): no requirements file to write"
        )
    if len(locks) > 1:
        which = ", ".join(w for w, _ in locks.values())
        raise NotReproducible(
            f"{target.name} ran in {len(locks)} environments ({which}): give one point's id to write its lock"
        )
    ((who, req),) = locks.values()
    file = Path(path)
    check_env_file(path)
    text = requirements_text(req, f"{target.name} ({who})")  # a lock entry that is no requirement refuses here
    try:
        write_atomic(file, text)  # report -o's rules: never a store, a link, a FIFO, /proc; written, then renamed
    except OutputError as exc:
        raise NotReproducible(str(exc)) from None
    except OSError as exc:
        raise NotReproducible(f"cannot write {file}: {exc.strerror or exc}") from None
    where = file.absolute()  # as run names its store: from any folder, the path to pip install -r
    return f"wrote {len(req.packages)} pinned packages to {where} (pip install -r {where})"


def side_by_side(old: StoredPoint, new: StoredPoint) -> Table:
    """The original point and its re-measurement, field by field (every figure whole at 80 columns)."""
    t = Table(title="original and again")
    t.add_column("", no_wrap=True, style="bold")
    t.add_column("original", overflow="fold")
    t.add_column("again", overflow="fold")
    for (name, a), (_, b) in zip(_fields(old), _fields(new)):
        t.add_row(name, escape(printable(a)), escape(printable(b)))
    return t


def _fields(p: StoredPoint) -> list[tuple[str, str]]:
    r, m = p.result, p.result.metrics
    req = request_of(r)
    spread = (
        "± " + fmt_spread(m.throughput, (m.ci_high - m.ci_low) / 2)
        if m and m.has_spread and m.ci_high is not None and m.ci_low is not None
        else f"n={m.repeats}: no CI"
        if m
        else "-"
    )
    return [
        ("point", p.uid[:UID_SHOWN]),
        ("run", p.run_id),
        ("status", r.status),
        ("samples/s", fmt_rate(m.throughput) if m else "-"),
        ("95% CI", spread),
        ("median step s", f"{m.median_step_s:.4g}" if m else "-"),
        ("repeats", str(m.repeats) if m else "-"),
        ("threads", r.env.identity.get("threads", "?")),
        ("contended", contention_of(r) or "no"),
        ("framework", f"{r.spec.framework} {r.env.identity.get('framework_version', '?')}"),
        ("device", r.env.identity.get("device_model", r.spec.device)),
        ("host", r.env.descriptive.get("hostname", "?")),
        ("python", req.python_version if req and req.python_version else r.env.descriptive.get("python", "?")),
        ("dlbench", (req.dlbench_commit or req.dlbench_version) if req else r.env.identity.get("dlbench_version", "?")),
        ("forced", req.forced if req and req.forced else "-"),
    ]


def verdict_line(pc: PointComparison) -> str:
    """compare's verdict on one configuration, in one line (A is the original, B the point measured again)."""
    if pc.verdict == CONTENDED:
        pc = replace(pc, note=pc.note.replace("A: ", "original: ").replace("B: ", "again: "))
    if pc.ratio is None:
        return f"verdict: {pc.verdict}" + (f" ({pc.note})" if pc.note else "")
    ci = f", 95% CI {pc.ci_low:.3f} - {pc.ci_high:.3f}" if pc.ci_low is not None and pc.ci_high is not None else ""
    p = f", p = {pc.p_value:.2g}" if pc.p_value is not None else ""
    return f"verdict: {pc.verdict} (again / original = {pc.ratio:.3f}{ci}{p})" + (f"; {pc.note}" if pc.note else "")


@click.command("reproduce")
@click.argument("ident", metavar="POINT_OR_RUN")
@click.option(
    "--env-file",
    type=click.Path(dir_okay=False),
    help="Write the point's package lock here as a pip requirements file.",
)
@click.option(
    "--run",
    "again",
    is_flag=True,
    help="Measure it again here, store it, and show both side by side with compare's verdict.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --run: measure even where the framework's version here differs (recorded on the new point), and start "
    "more ranks or threads than this machine has GPUs or logical CPUs, as run --force does.",
)
@click.option(
    "--min-effect",
    default=f"{MIN_EFFECT:.0%}",
    show_default=True,
    help="With --run: smallest change that can be called faster or slower.",
)
@click.option("--store", "store_path", type=click.Path(), help="Result store.")
def reproduce(
    ident: str, env_file: str | None, again: bool, force: bool, min_effect: str, store_path: str | None
) -> int:
    """How a stored point (or run) was made: command, package lock, host; --run measures it again beside it."""
    effect = parse_percent(min_effect)
    if force and not again:
        raise click.UsageError("--force only applies with --run")
    if env_file:
        check_env_file(env_file)  # before the store is opened: a store, a link or a FIFO is never an output
    store = Store.open(store_path, readonly=not again, recover=again)
    target = readable(find(store, ident))
    if again and not target.points:
        raise NotReproducible(f"run {target.run.id} has no points, so nothing to measure again")
    out = stdout_console()
    show(out, target)
    if env_file:
        _say(out, write_env_file(target, env_file))
    if not again:
        return 0
    ready = check_environment(target, force)  # before anything is written
    err = Console(stderr=True)
    for note in ready.notes:
        err.print(escape(note), highlight=False)
    c, new_id = measure_again(
        store,
        target,
        command_line(f"dlbench reproduce {ident} --run"),
        ready,
        effect,
        force=force,
        progress=lambda total: RunProgress(total, err),
    )
    new = store.points([new_id])
    for line in identity_lines(c):
        _say(out, line.replace("(rerun)", "(again)"))
    if len(target.points) == 1 and len(new) == 1:  # one point (or a run of one): side by side
        out.print(side_by_side(target.points[0], new[0]))
        for pc in c.points:
            _say(out, verdict_line(pc))  # with the reason where the samples could not show a change
    else:
        out.print(comparison_table(c))
        for line in undetectable_lines(c) + contended_lines(c):
            _say(out, line)
    _say(out, f"Method: {c.method}.")
    _say(out, f"Results: {store.path} (run {new_id}). `dlbench compare {target.run.id} {new_id}` compares the runs.")
    return exit_code(p.result.status for p in new)
