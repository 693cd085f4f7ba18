"""A sweep's tables: its planned points (--dry-run), its points as run, and its max-batch searches."""

from __future__ import annotations

from dlbench.analysis.maxbatch import BATCH, MaxBatch, MaxBatchSettings, probe_bound, search_base, value_of
from dlbench.analysis.memory import estimate, gib
from dlbench.records import PointResult
from dlbench.report.digits import fmt_rate
from dlbench.report.fit import Fitted
from dlbench.report.listing import dry_run_table, maxbatch_rows_table
from dlbench.report.table import fmt_case_params, points_table
from dlbench.spec import PointSpec
from dlbench.suite import Suite
from dlbench.suite.expand import PlannedPoint


def batch_label(p: PlannedPoint, found: MaxBatch | None, settings: MaxBatchSettings) -> str:
    """How a planned point's batch reads in --dry-run."""
    if not p.needs_search:
        return f"{p.spec.batch_size} ({p.batch_group})" if p.batch_group != str(p.spec.batch_size) else p.batch_group
    if found is not None:
        return f"{found.max_batch} (max, stored)" if found.max_batch else "max: none fits (stored)"
    return f"max (search {settings.lo}..{settings.hi})"


def plan_table(
    suite: Suite, planned: tuple[PlannedPoint, ...], found: tuple[MaxBatch | None, ...], settings: MaxBatchSettings
) -> Fitted:
    """The planned points, one row each, with the max batch the store holds where one is searched (the axes every
    point shares are said in the title)."""
    rows = []
    for i, (p, stored) in enumerate(zip(planned, found), start=1):
        s = p.spec
        model = s.model + fmt_case_params([(k, v) for k, v in s.case_params if k != p.param_search])
        model += f" {p.param_search}=max" if p.param_search else ""
        rows.append(
            (
                str(i),
                s.framework,
                model,
                batch_label(p, stored, settings),
                s.precision,
                "on" if s.compile else "off",
                s.data,
                s.scale,
                s.strategy,
                _estimate(s) if not p.needs_search else "-",
            )
        )
    return dry_run_table(f"suite {suite.name}: {len(planned)} points", rows)


def _estimate(spec: PointSpec) -> str:
    found = estimate(spec)
    return gib(found.total) if found is not None else "-"


def plan_notes(suite: Suite, planned: tuple[PlannedPoint, ...], settings: MaxBatchSettings) -> list[str]:
    """The lines under the planned points: the protocol, and how many max-batch searches there are."""
    lines = []
    searches = len({search_base(p.spec).key() for p in planned if p.needs_search})
    if planned:
        proto = planned[0].spec.protocol
        lines.append(
            f"{suite.title or suite.name}. Protocol: {proto.warmup} warm-up and {proto.steps} measured "
            f"steps, {proto.statistic} of {proto.repeats} repeats; timeout {planned[0].spec.timeout_s:g} s "
            "per point."
        )
    if searches:
        lines.append(
            f"{searches} max-batch searches (at most {probe_bound(settings.lo, settings.hi)} probes each, "
            "fewer where the store has them)."
        )
    return lines


def sweep_table(results: list[PointResult], title: str, width: int | None = None) -> Fitted:
    """The points table (report/table.py, compact and never cutting what tells rows apart) with the sweep's own
    columns where they say something: the batch group (fixed, max ...) and the input wait of real data (peak memory
    and the rest: `dlbench results RUN --wide`)."""
    group = any(str(r.extra.get("batch_group", r.spec.batch_size)) != str(r.spec.batch_size) for r in results)
    wait = any(r.spec.data == "real" for r in results)
    extra = (*(("group",) if group else ()), *(("wait",) if wait else ()))
    return points_table(results, title=title, extra=extra, width=width, more="`dlbench results RUN --wide` shows them")


def maxbatch_table(searches: dict[str, MaxBatch], results: list[PointResult], bases: dict[str, PointSpec]) -> Fitted:
    """One row per search (of the batch, or of a case parameter): the max found, whether exact, probes, and the
    throughput at the max."""
    batch_only = all(f.quantity == BATCH for f in searches.values())
    rows = []
    for key, found in searches.items():
        b = bases[key]
        at_max = [
            r
            for r in results
            if r.spec.framework == b.framework
            and r.spec.model == b.model
            and r.spec.precision == b.precision
            and r.spec.compile == b.compile
            and r.spec.data == "synthetic"
            and value_of(r.spec, found.quantity) == found.max_batch
            and r.metrics is not None
        ]
        thr = (
            fmt_rate(at_max[0].metrics.throughput)
            if at_max and at_max[0].metrics
            else (f"{fmt_rate(found.at_max.throughput)} (probe)" if found.at_max and found.at_max.throughput else "-")
        )
        what = "" if found.quantity == BATCH else f" ({found.quantity})"
        rows.append(
            (
                b.framework,
                b.model + what,
                b.precision + (" +compile" if b.compile else ""),
                str(found.max_batch) if found.max_batch else "none",
                "yes" if found.exact else "no",
                f"{len(found.probes)} ({found.new_probes})",
                str(probe_bound(found.lo, found.hi)),
                thr,
                found.note,
            )
        )
    return maxbatch_rows_table("max batch size" if batch_only else "max searches", rows)
