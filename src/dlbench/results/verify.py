"""Re-derive every stored point's metrics from its raw samples and report where they differ from what is
stored, as MLPerf's log checker does for its logs: a hand-edited throughput cannot pass."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from dlbench.protocol.stats import summarize
from dlbench.results.rows import StoredPoint
from dlbench.results.schema import without_spread

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
            math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def verify_point(p: StoredPoint, stored: dict[str, object] | None) -> Mismatch | None:
    """None when the stored metrics (the JSON as stored: only the fields it has are checked, so an older
    point is not blamed for fields added since) are those the raw samples give; else what differs."""
    r = p.result
    s = r.spec
    label = f"{s.framework} {s.model} batch {s.batch_size} {s.precision} {s.scale}"
    if stored is None:
        return None if r.status != "ok" else Mismatch(p.run_id, p.uid, label, ("status ok but no metrics",))
    try:
        derived = asdict(summarize(s, r.ranks))
    except Exception as exc:  # raw samples that the statistics cannot read are a finding, not a crash
        return Mismatch(p.run_id, p.uid, label, (f"raw samples cannot be summarised: {exc}",))
    stored = without_spread(stored)  # older stores kept a zero-width CI for one repeat: read as no spread
    problems = tuple(f"{k}: stored {stored[k]!r}, raw samples give {derived[k]!r}"
                     for k in sorted(set(stored) & set(derived)) if not _same(stored[k], derived[k]))
    return Mismatch(p.run_id, p.uid, label, problems) if problems else None


def verify(points: list[StoredPoint], stored: dict[str, dict[str, object]]) -> list[Mismatch]:
    """Every point whose stored metrics (stored: metrics JSON by point uid) differ from its raw samples."""
    return [m for m in (verify_point(p, stored.get(p.uid)) for p in points) if m is not None]
