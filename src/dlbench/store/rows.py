"""A point result <-> a row of the store: the one mapping, used by the store, its recovery file and copies.

Spec, ranks and metrics stay JSON text, rebuilt by PointSpec.from_json, RankRaw.from_dict and Metrics.from_dict,
so the store never depends on their fields. A row that cannot be read back raises CorruptRow, naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dlbench.records import STATUSES, Environment, Metrics, PointResult, RankRaw
from dlbench.spec import PointSpec
from dlbench.store.validate import INVALID, metric_problems, rank_problems

POINT_COLUMNS = (
    "uid",
    "run_id",
    "spec_key",
    "framework",
    "model",
    "batch_size",
    "precision",
    "status",
    "error",
    "spec_json",
    "ranks_json",
    "metrics_json",
    "env_json",
    "identity_json",
    "descriptive_json",
    "extra_json",
    "started",
    "finished",
)
RUN_COLUMNS = ("id", "created", "command", "status", "kind", "meta_json", "host", "pid", "pid_started", "reason")


class CorruptRow(ValueError):
    """A stored row whose JSON or values cannot be read back."""


@dataclass(frozen=True)
class RunRecord:
    """A run: a group of points made by one command."""

    id: str
    created: float
    kind: str
    command: str
    status: str
    meta: dict[str, object]
    points: int = 0
    host: str | None = None
    pid: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class StoredPoint:
    """A point as kept: its row id in this store, its run, its full result and its globally unique id."""

    id: int
    run_id: str
    result: PointResult
    uid: str = ""


def point_row(run_id: str, uid: str, result: PointResult) -> dict[str, object]:
    """The column values of one point (JSON text for the structured parts)."""
    s = result.spec
    return {
        "uid": uid,
        "run_id": run_id,
        "spec_key": s.key(),
        "framework": s.framework,
        "model": s.model,
        "batch_size": s.batch_size,
        "precision": s.precision,
        "status": result.status,
        "error": result.error,
        "spec_json": s.to_json(),
        "ranks_json": json.dumps([asdict(r) for r in result.ranks]),
        "metrics_json": json.dumps(asdict(result.metrics)) if result.metrics else None,
        "env_json": json.dumps({**result.env.identity, **result.env.descriptive}),
        "identity_json": json.dumps(result.env.identity),
        "descriptive_json": json.dumps(result.env.descriptive),
        "extra_json": json.dumps(result.extra),
        "started": result.started,
        "finished": result.finished,
    }


def _load(row: Mapping[Any, Any], column: str) -> object:
    try:
        return json.loads(str(row[column]))
    except (TypeError, ValueError) as exc:
        raise CorruptRow(f"corrupt {column} ({exc})") from None


def stored_point(row: Mapping[Any, Any]) -> StoredPoint:
    """Rebuild a point from its row; CorruptRow names the column that cannot be read."""
    try:
        spec = PointSpec.from_json(str(row["spec_json"]))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CorruptRow(f"corrupt spec_json ({why})") from None
    ranks, ident, desc, extra = (
        _load(row, c) for c in ("ranks_json", "identity_json", "descriptive_json", "extra_json")
    )
    metrics = _load(row, "metrics_json") if row["metrics_json"] is not None else None
    if not (
        isinstance(ranks, list)
        and isinstance(ident, dict)
        and isinstance(desc, dict)
        and isinstance(extra, dict)
        and (metrics is None or isinstance(metrics, dict))
    ):
        raise CorruptRow("corrupt JSON: a list or object has the wrong shape")
    problems = rank_problems(ranks) + (metric_problems(metrics) if metrics is not None else [])
    if row["status"] not in STATUSES:
        problems.insert(0, f"status {row['status']!r} is not one dlbench writes")
    if problems:  # shown as `invalid` with its id by every reader, never a crash; --verify says the rest
        return invalid_point(row, spec, Environment(identity=ident, descriptive=desc), extra, problems)
    try:
        result = PointResult(
            spec=spec,
            status=str(row["status"]),  # type: ignore[arg-type]
            error=row["error"],
            ranks=tuple(RankRaw.from_dict(x) for x in ranks),
            metrics=Metrics.from_dict(metrics) if metrics is not None else None,
            env=Environment(identity=ident, descriptive=desc),
            extra=extra,
            started=float(row["started"]),
            finished=float(row["finished"]),
        )
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CorruptRow(f"corrupt ranks_json or metrics_json ({exc})") from None
    return StoredPoint(int(row["id"]), str(row["run_id"]), result, str(row.get("uid") or ""))


def _seconds(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def invalid_point(
    row: Mapping[Any, Any], spec: PointSpec, env: Environment, extra: dict[str, object], problems: list[str]
) -> StoredPoint:
    """A row whose figures cannot be trusted, as readers show it: status `invalid`, no metrics or samples, the
    first problem and the point's id in its error."""
    uid = str(row.get("uid") or row["id"])
    more = f" (and {len(problems) - 1} more: dlbench results {row['run_id']} --verify)" if len(problems) > 1 else ""
    result = PointResult(
        spec=spec,
        status=INVALID,  # type: ignore[arg-type]
        env=env,
        extra=extra,
        error=f"invalid stored point {uid}: {problems[0]}{more}",
        started=_seconds(row["started"]),
        finished=_seconds(row["finished"]),
    )
    return StoredPoint(int(row["id"]), str(row["run_id"]), result, str(row.get("uid") or ""))


def run_record(row: Mapping[Any, Any], status: str, count: int) -> RunRecord:
    """Rebuild a run from its row, with the status a reader should see; CorruptRow for bad metadata."""
    meta = _load(row, "meta_json")
    if not isinstance(meta, dict):
        raise CorruptRow("corrupt meta_json (not an object)")
    pid = row.get("pid")
    return RunRecord(
        str(row["id"]),
        float(row["created"]),
        str(row["kind"]),
        str(row["command"]),
        status,
        meta,
        count,
        row.get("host"),
        int(pid) if pid is not None else None,
        row.get("reason"),
    )
