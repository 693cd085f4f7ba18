"""Locating a change between framework releases (#49), as asv's `find` locates one between commits: measure the two
ends; if the newer is significantly slower (or faster) than the older, halve the releases between them, each
middle release judged against the older end with compare's verdict (analysis/compare.py: the same test, minimum
effect, power check and contended rule), until the two releases left are neighbours: the change came between
them. It stops early, saying why, where a verdict cannot be drawn (not enough samples, contended, a failed point)
or a release cannot be measured. Measuring is the caller's (runapi/bisect.py): this module only decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlbench.analysis.compare import FASTER, SAME, SLOWER, PointComparison
from dlbench.records import PointResult

Judge = Callable[[PointResult, PointResult], PointComparison]


class CannotMeasure(Exception):
    """A release the halving needs cannot be measured here (not set up); the message says what to do."""


@dataclass(frozen=True)
class Probe:
    """One release's point, measured now or read from the store (`reused`: the run it was stored in)."""

    release: str
    result: PointResult
    reused: str = ""


@dataclass(frozen=True)
class Bisection:
    """Where a change between the first and last release came: `before` (no significant change from the first) and
    `after` (changed), neighbours when located; `change` is after against before. `stopped` says why the halving
    ended before that ('' when located, or when the ends showed no change: `direction` is then '')."""

    releases: tuple[str, ...]
    probes: tuple[Probe, ...]
    before: str
    after: str
    direction: str = ""  # FASTER or SLOWER: the ends' verdict
    ends: PointComparison | None = None
    change: PointComparison | None = None
    stopped: str = ""

    @property
    def located(self) -> bool:
        """Whether the change was placed between two neighbouring releases."""
        return bool(self.direction) and not self.stopped and self._neighbours()

    def _neighbours(self) -> bool:
        return self.releases.index(self.after) - self.releases.index(self.before) == 1

    @property
    def measured(self) -> int:
        """Points measured now (not read from the store)."""
        return sum(1 for p in self.probes if not p.reused)


def most_probes(n: int) -> int:
    """The most points the halving of n releases reads: the two ends and ceil(log2(n - 1)) middles."""
    return 2 + (math.ceil(math.log2(n - 1)) if n > 2 else 0)


def bisect(releases: Sequence[str], measure: Callable[[str], Probe], judge: Judge) -> Bisection:
    """Halve the releases (oldest first) between the first and the last, measuring only the releases it visits."""
    rel = tuple(releases)
    if len(rel) < 2:
        raise ValueError("bisect needs two releases or more")
    probes: dict[str, Probe] = {}

    def point(r: str) -> PointResult:
        if r not in probes:
            probes[r] = measure(r)
        return probes[r].result

    def done(lo: int, hi: int, direction: str, ends: PointComparison | None, stopped: str = "") -> Bisection:
        change = judge(probes[rel[lo]].result, probes[rel[hi]].result) if direction else ends
        return Bisection(rel, tuple(probes.values()), rel[lo], rel[hi], direction, ends, change, stopped)

    lo, hi = 0, len(rel) - 1
    try:
        ends = judge(point(rel[lo]), point(rel[hi]))
    except CannotMeasure as exc:
        return Bisection(rel, tuple(probes.values()), rel[lo], rel[hi], stopped=str(exc))
    if ends.verdict not in (FASTER, SLOWER):
        why = "" if ends.verdict == SAME else f"no verdict between the ends: {_why(ends)}"
        return Bisection(rel, tuple(probes.values()), rel[lo], rel[hi], "", ends, ends, why)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            v = judge(point(rel[0]), point(rel[mid]))
        except CannotMeasure as exc:
            return done(lo, hi, ends.verdict, ends, str(exc))
        if v.verdict == ends.verdict:
            hi = mid
        elif v.verdict == SAME:
            lo = mid
        else:  # the other direction, not enough samples, contended, failed: the halving cannot go on
            return done(lo, hi, ends.verdict, ends, f"{rel[mid]} against {rel[0]}: {_why(v)}")
    return done(lo, hi, ends.verdict, ends)


def _why(c: PointComparison) -> str:
    """A verdict that does not say which side of the change a release is on, and why."""
    if c.verdict in (FASTER, SLOWER):
        return f"{c.verdict} ({c.change:+.1%}), the other way from the ends" if c.change is not None else c.verdict
    return c.verdict + (f" ({c.note})" if c.note else "")


__all__ = ["Bisection", "CannotMeasure", "Judge", "Probe", "bisect", "most_probes"]
