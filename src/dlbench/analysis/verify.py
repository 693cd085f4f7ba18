"""Re-derive every stored point's metrics from its raw samples and report where they differ from what is
stored, as MLPerf's log checker does for its logs: a hand-edited throughput cannot pass. Beyond the figures it
checks what a reader trusts without deriving: the status (one dlbench writes, and metrics only on an ok point),
the columns the store is queried by (batch size, framework, model, precision, key) against the point's spec,
each value's type, and fields no dlbench writes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from dlbench.protocol.stats import summarize
from dlbench.records import without_spread
from dlbench.store.rows import StoredPoint
from dlbench.store.validate import INVALID, metric_problems, rank_problems, status_problems, unknown_fields

REL_TOL = 1e-9


@dataclass(frozen=True)
class Mismatch:
    """One point whose stored figures are not what its raw samples give."""

    run_id: str
    uid: str
    label: str
    problems: tuple[str, ...]


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12) or (
            math.isnan(float(a)) and math.isnan(float(b))
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _json(text: object) -> object:
    try:
        return json.loads(str(text)) if text is not None else None
    except (ValueError, RecursionError):
        return None


def row_problems(p: StoredPoint, row: Mapping[str, object]) -> list[str]:
    """What the stored row says that its point does not: a status, the columns beside the spec, value types
    and fields no dlbench writes."""
    s = p.result.spec
    metrics, ranks = _json(row.get("metrics_json")), _json(row.get("ranks_json"))
    ranks = ranks if isinstance(ranks, list) else []
    out = status_problems(row.get("status"), metrics is not None)
    for column, value in (
        ("batch_size", s.batch_size),
        ("framework", s.framework),
        ("model", s.model),
        ("precision", s.precision),
        ("spec_key", s.key()),
    ):
        if row.get(column) != value:
            out.append(f"the {column} column reads {row.get(column)!r}, the point's spec {value!r}")
    if isinstance(metrics, dict):
        out += metric_problems(metrics)
    out += rank_problems(ranks)
    out += unknown_fields(metrics if isinstance(metrics, dict) else None, ranks)
    return out


def verify_point(p: StoredPoint, stored: Mapping[str, object] | None) -> Mismatch | None:
    """None when the stored row (its raw columns; None: not given) is what the point's spec and raw samples
    give; else every difference. Only the metric fields a row has are compared, so an older point is not
    blamed for fields added since."""
    r = p.result
    s = r.spec
    label = f"{s.framework} {s.model} batch {s.batch_size} {s.precision} {s.scale}"
    problems = row_problems(p, stored) if stored is not None else []
    metrics = _json(stored.get("metrics_json")) if stored is not None else None
    if metrics is None:
        if r.status == "ok":
            problems.append("status ok but no metrics")
    elif r.status != INVALID and isinstance(metrics, dict):
        metrics = without_spread(metrics)  # older stores kept a zero-width CI for one repeat: read as no spread
        try:
            derived = asdict(summarize(s, r.ranks))
        except Exception as exc:
            problems.append(f"raw samples cannot be summarised: {exc}")
        else:
            problems += [
                f"{k}: stored {metrics[k]!r}, raw samples give {derived[k]!r}"
                for k in sorted(set(metrics) & set(derived))
                if not _same(metrics[k], derived[k])
            ]
    return Mismatch(p.run_id, p.uid, label, tuple(problems)) if problems else None


def verify(points: list[StoredPoint], stored: Mapping[str, Mapping[str, object]]) -> list[Mismatch]:
    """Every point whose stored row (stored: raw columns by point uid) differs from its spec and raw samples."""
    return [m for m in (verify_point(p, stored.get(p.uid)) for p in points) if m is not None]
