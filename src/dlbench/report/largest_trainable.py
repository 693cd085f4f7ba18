"""The seeds' special cases in the report, as a table: the largest value of a case parameter that trains
(`--param classes=max`, `vocab: max` in a suite), in the shape of DLPerf's InsightFace "Max num_classes" table,
with DLPerf's published rows beside it.

Each row is a point measured at the value its search found (extra['max_param'], kept by `run` and `sweep`):
the value that trained, the next probed value that ran out of memory, and whether the interval closed within
the parameter's unit and held when both ends were run again (analysis/maxbatch.confirm). A point measured at the max
that then failed (out of memory, say) demotes it: the row says the largest is below it. Plain points in, rows
out; no framework is imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dlbench.cases.face import DLPERF_MAX_CLASSES, MODES
from dlbench.records import PointResult
from dlbench.report.table import fmt_count
from dlbench.store.store import StoredPoint


@dataclass(frozen=True)
class MaxValueRow:
    """One searched maximum: the configuration, the largest value that trained and the next that did not."""

    framework: str
    model: str
    name: str
    mode: str
    scale: str
    batch: int
    precision: str
    budget: str
    largest: str
    fails_at: str
    exact: str
    probes: int
    point_id: int
    demoted: bool = False  # the point measured at the search's max failed: the largest is below it


@dataclass(frozen=True)
class PublishedMax:
    """A row of DLPerf's InsightFace table (V100 16 GB, batch 64, fp16, model parallel and Partial FC)."""

    scale: str
    oneflow: str
    mxnet: str


def mode_of(model: str, params: dict[str, int], searched: str) -> str:
    """A face point's classifier mode by name ('partial_fc'), else the other case parameters ('sparse=0')."""
    if model == "face":
        got = (params.get("model_parallel", 0), params.get("sample", 100))
        return next((name for name, mp in MODES.items() if mp == got), f"model_parallel={got[0]}, sample={got[1]}%")
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != searched) or "-"


def _budget(p: StoredPoint) -> str:
    s = p.result.spec
    if s.memory_limit_bytes is not None:
        return f"{s.memory_limit_bytes / 2**30:.4g} GiB (emulated)"
    return p.result.env.identity.get("device_model", "") or s.device


def _checks(checks: object) -> str:
    """' (run again: 41K oom, 40K ok)' from the search's boundary checks, '' when there were none."""
    if not isinstance(checks, list) or not checks:
        return ""
    return " (run again: " + ", ".join(f"{fmt_count(v)} {st}" for v, st in checks) + ")"


@dataclass(frozen=True)
class Verdict:
    """What a search found, as the table says it; `demoted` when the point measured at the max then failed."""

    largest: str
    fails_at: str
    exact: str
    demoted: bool = False


def verdict(r: PointResult, facts: dict[str, object]) -> Verdict:
    """The largest value that trains, the next that did not, and whether that held; a point measured at the
    search's max that did not end ok demotes it: the largest is then below it, and not exact."""
    unit = facts.get("unit") or 1
    found, over, hi = facts.get("max"), facts.get("fails_at"), facts.get("hi")
    if isinstance(found, int) and r.status != "ok":
        return Verdict(
            f"below {fmt_count(found)}",
            f"{fmt_count(found)} ({r.status} when measured)",
            f"no: {fmt_count(found)} trained in the search, the point measured there ended {r.status}",
            demoted=True,
        )
    return Verdict(
        largest=fmt_count(found) if isinstance(found, int) else "none trains",
        fails_at=fmt_count(over)
        if isinstance(over, int)
        else f"not probed (bound {fmt_count(hi)})"
        if isinstance(hi, int)
        else "not probed",
        exact=f"within {fmt_count(unit)}, reproduced{_checks(facts.get('checks'))}"  # type: ignore[arg-type]
        if facts.get("exact")
        else str(facts.get("note") or "no"),
    )


def verdict_lines(results: list[PointResult]) -> list[str]:
    """One line per point measured at a searched case parameter's maximum, for `run` to print under its table."""
    out = []
    for r in results:
        facts = r.extra.get("max_param")
        if isinstance(facts, dict) and isinstance(facts.get("name"), str):
            v, s = verdict(r, facts), r.spec
            over = "" if v.demoted or v.fails_at.startswith("not probed") else f", {v.fails_at} ran out of memory"
            out.append(
                f"largest {facts['name']} that trains, {s.framework} {s.model} bs{s.batch_size} {s.scale}: "
                f"{v.largest}{over}; exact: {v.exact}"
            )
    return out


def _config(p: StoredPoint, name: str) -> str:
    """The point's configuration less the value searched: rows with the same one are repeats (newest wins)."""
    d = json.loads(p.result.spec.key())
    d["case_params"] = [kv for kv in d.get("case_params", []) if kv[0] != name]
    return json.dumps(d, sort_keys=True) + _budget(p)


def max_value_rows(points: list[StoredPoint]) -> list[MaxValueRow]:
    """Every point measured at a searched case parameter's maximum, the newest per configuration (any other
    difference, such as threads or input size, makes a row of its own), sorted by model, parameter, scale, mode
    and framework."""
    latest: dict[str, MaxValueRow] = {}
    for p in sorted(points, key=lambda p: p.result.started or 0.0):
        facts = p.result.extra.get("max_param")
        if not isinstance(facts, dict) or not isinstance(facts.get("name"), str):
            continue
        s, name = p.result.spec, facts["name"]
        v = verdict(p.result, facts)
        row = MaxValueRow(
            framework=s.framework,
            model=s.model,
            name=name,
            mode=mode_of(s.model, dict(s.params), name),
            scale=s.scale,
            batch=s.batch_size,
            precision=s.precision,
            budget=_budget(p),
            largest=v.largest,
            fails_at=v.fails_at,
            exact=v.exact,
            probes=int(facts.get("probes") or 0),
            point_id=p.id,
            demoted=v.demoted,
        )
        latest[_config(p, name)] = row
    return sorted(latest.values(), key=lambda r: (r.model, r.name, r.scale, r.mode, r.framework))


def dlperf_max_classes() -> list[PublishedMax]:
    """DLPerf's published max num_classes (seed 003), 1 node x 1 and x 8 V100-SXM2-16GB."""
    return [
        PublishedMax(f"{n}n{d}c", fmt_count(of), fmt_count(mx))
        for (n, d), (of, mx) in sorted(DLPERF_MAX_CLASSES.items())
    ]


REFERENCE_NOTE = (
    "DLPerf (seed 003, InsightFace): the largest num_classes that trained at batch 64 per device "
    "on Tesla V100-SXM2-16GB, fp16, with model parallelism and Partial FC (dlbench's partial_fc "
    "mode), OneFlow 0.3.4 and MXNet (deepinsight/insightface). Compare the order of the modes and "
    "how the maximum grows with devices, not values, unless the device and budget match."
)

__all__ = [
    "REFERENCE_NOTE",
    "MaxValueRow",
    "PublishedMax",
    "Verdict",
    "dlperf_max_classes",
    "max_value_rows",
    "mode_of",
    "verdict",
    "verdict_lines",
]
