"""A configuration's throughput over time and over framework versions, with its change points.

A series is one configuration (`PointSpec.key()` and the protocol) on one kind of machine (the identity keys
that describe hardware). Software versions (framework, CUDA, dlbench ...) may change along a series: that is
what history is for, and each point shows them. Each ok point is compared, with the raw samples and the very
test `dlbench compare` uses (`compare_points`: hierarchical bootstrap CI, Mann-Whitney, p < 0.01, CI excluding
1, at least a 2% effect), with the point that opened its segment: the series' first point, or the last change
found. So a step change is flagged where it happens, a slow drift once it adds up to a significant change, and
noise is not called a change. A comparison whose samples could not have reached p < 0.01 at all (4 against 4 step
times) is "not enough samples" (analysis/statistical_power.py), never a quiet "no change". A point measured under contention is
never a segment's start, and its comparison is "contended: no verdict" (compare.py): its figure is kept and shown
with the mark, but no change is called from it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass

from dlbench.analysis.compare import (
    FASTER,
    MIN_EFFECT,
    SLOWER,
    UNDETECTABLE,
    PointComparison,
    compare_points,
    contention_of,
    distinct_labels,
    label,
)
from dlbench.store.rows import StoredPoint

REGRESSION, IMPROVEMENT = "regression", "improvement"
VERSION_KEYS = frozenset({"framework_version", "dlbench_version", "cuda", "cudnn", "nccl", "driver"})
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.ASCII)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class HistoryPoint:
    """One measured point of a series, and how it compares with its segment's first point."""

    point: StoredPoint
    versions: dict[str, str]
    baseline: StoredPoint | None = None
    comparison: PointComparison | None = None

    @property
    def change(self) -> str:
        """'regression', 'improvement' or '' (no significant change, or nothing to compare with)."""
        v = self.comparison.verdict if self.comparison else ""
        return REGRESSION if v == SLOWER else IMPROVEMENT if v == FASTER else ""

    @property
    def undetectable(self) -> bool:
        """True when this point's samples, or its baseline's, could not have shown a change."""
        return self.comparison is not None and self.comparison.verdict == UNDETECTABLE

    @property
    def contended(self) -> str:
        """Why no change can be called at this ok point (it was measured under contention), '' otherwise (a
        segment's start is never contended, so a comparison is contended exactly when its point is)."""
        r = self.point.result
        return contention_of(r) if r.status == "ok" and r.metrics is not None else ""


@dataclass(frozen=True)
class Series:
    """One configuration on one kind of machine, oldest point first."""

    key: str
    label: str
    framework: str
    model: str
    hardware: dict[str, str]
    points: tuple[HistoryPoint, ...]

    @property
    def changes(self) -> list[HistoryPoint]:
        """The points where a regression or an improvement was found."""
        return [p for p in self.points if p.change]

    @property
    def undetectable(self) -> list[HistoryPoint]:
        """The points whose comparison could not have shown a change ('not enough samples')."""
        return [p for p in self.points if p.undetectable]

    @property
    def latest_regressed(self) -> bool:
        """True when the newest point is a significant regression (what CI should fail on)."""
        return bool(self.points) and self.points[-1].change == REGRESSION

    @property
    def latest_contended(self) -> bool:
        """True when the newest point was measured under contention: no verdict on it (inconclusive for CI)."""
        return bool(self.points) and bool(self.points[-1].contended)


MAX_AGE_S = 100 * 365.25 * 86400


def parse_since(text: str, now: float | None = None) -> float:
    """'30d', '12h', '2w' ... -> the POSIX time that long ago."""
    m = _SINCE.match(text)
    if not m:
        raise ValueError(f"--since takes a duration like 30d, 12h or 2w; got {text!r}")
    age = float(m.group(1)) * _UNIT_S[m.group(2)]
    if age > MAX_AGE_S:  # before any computer ran a benchmark; a SQL float or datetime would overflow further
        raise ValueError(f"--since {text} reaches back more than 100 years: give a shorter duration")
    return (now if now is not None else time.time()) - age


def series_key(p: StoredPoint) -> str:
    """Configuration, protocol and hardware identity: what must stay the same along a series."""
    ident = {k: v for k, v in p.result.env.identity.items() if k not in VERSION_KEYS}
    return json.dumps([p.result.spec.key(), str(p.result.spec.protocol), ident], sort_keys=True)


def build_series(points: list[StoredPoint], min_effect: float = MIN_EFFECT) -> list[Series]:
    """Group points into series (ordered by time) and find each series' change points."""
    groups: dict[str, list[StoredPoint]] = defaultdict(list)
    for p in points:
        groups[series_key(p)].append(p)
    out = []
    for key, members in groups.items():
        members.sort(key=lambda p: (p.result.finished, p.id))
        hist: list[HistoryPoint] = []
        baseline: StoredPoint | None = None
        for p in members:
            versions = {k: v for k, v in p.result.env.identity.items() if k in VERSION_KEYS}
            if p.result.status != "ok" or p.result.metrics is None:
                hist.append(HistoryPoint(p, versions))
                continue
            if baseline is None:
                if not contention_of(p.result):  # a contended figure never opens a segment
                    baseline = p
                hist.append(HistoryPoint(p, versions))
                continue
            c = compare_points(baseline.result, p.result, min_effect)
            hist.append(HistoryPoint(p, versions, baseline, c))
            if c.verdict in (FASTER, SLOWER):
                baseline = p  # a new segment starts at the change
        first = members[0].result
        ident = {k: v for k, v in first.env.identity.items() if k not in VERSION_KEYS}
        out.append(Series(key, label(first), first.spec.framework, first.spec.model, ident, tuple(hist)))
    names = distinct_labels([s.points[0].point.result for s in out])  # series that read alike are told apart
    out = [dataclasses.replace(s, label=name) for s, name in zip(out, names)]
    out.sort(key=lambda s: (s.model, s.framework, s.label))
    return out
