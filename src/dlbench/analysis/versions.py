"""The same configuration across framework releases (#49): `compare --by version` and `bisect`.

A point's release is the framework version its worker reported (`framework_version`, what ran), else the release
its spec asked for. Points group by their configuration less the release (`config_key`); within a configuration
each release keeps its newest point, the releases are ordered as pip orders them, and each release is compared
with the one before it by analysis/compare.py's `compare_points`: the same ratio, bootstrap interval,
Mann-Whitney test, minimum effect, power check and contended rule as two runs get, so a change between releases
is called only where it would be called between runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from dlbench.analysis.compare import (
    ALPHA,
    MIN_EFFECT,
    Comparison,
    PointComparison,
    compare_points,
    identity_differences,
    label,
)
from dlbench.records import PointResult
from dlbench.spec import release_key
from dlbench.store.rows import StoredPoint

OLDER, NEWER = "the older release", "the next release"  # the sides of a comparison by version


def release_of(r: PointResult) -> str:
    """The release a point ran: the framework version its worker reported, else the one its spec asked for; ''
    when neither is known."""
    return str(r.env.identity.get("framework_version") or r.spec.release or "")


def config_key(r: PointResult) -> str:
    """The point's configuration less the release (the framework's name stays): its key with no release."""
    return dataclasses.replace(r.spec, release=None).key()


def config_label(r: PointResult) -> str:
    """compare's label of the configuration, without the release: 'jax resnet50 bs8 fp32 1n1c'."""
    return label(dataclasses.replace(r, spec=dataclasses.replace(r.spec, release=None)))


@dataclass(frozen=True)
class Releases:
    """One configuration's newest point per release, oldest release first."""

    key: str
    label: str
    points: tuple[tuple[str, PointResult], ...]

    def releases(self) -> list[str]:
        """The releases measured, oldest first."""
        return [r for r, _ in self.points]

    def python_of(self, release: str) -> str:
        """The Python the release's point ran on ('' when not recorded)."""
        return str(dict(self.points)[release].env.descriptive.get("python", ""))


def by_release(points: Sequence[StoredPoint | PointResult]) -> tuple[list[Releases], int]:
    """Each configuration's points by release (a later point of a release wins, as a re-run does in compare), and
    how many points named no release at all (left out)."""
    groups: dict[str, dict[str, PointResult]] = {}
    unknown = 0
    for p in points:
        r = p.result if isinstance(p, StoredPoint) else p
        release = release_of(r)
        if not release:
            unknown += 1
            continue
        groups.setdefault(config_key(r), {})[release] = r
    out = []
    for key, per in groups.items():
        ordered = sorted(per.items(), key=lambda kv: release_key(kv[0]))
        out.append(Releases(key, config_label(ordered[0][1]), tuple(ordered)))
    out.sort(key=lambda g: g.label)
    return out, unknown


def _python_note(group: Releases, a: str, b: str) -> str:
    pa, pb = group.python_of(a), group.python_of(b)
    return f"Python {pa} -> {pb}" if pa and pb and pa.split(".")[:2] != pb.split(".")[:2] else ""


def step(
    group: Releases, a: str, b: str, min_effect: float = MIN_EFFECT, target: float | None = None
) -> PointComparison:
    """One configuration's change from release a to release b, labelled 'jax resnet50 ... 0.10.1 -> 0.10.2'; where
    they ran on different Pythons, the note says so."""
    per = dict(group.points)
    c = compare_points(per[a], per[b], min_effect, target)
    python = _python_note(group, a, b)
    note = "; ".join(x for x in (c.note, f"the Python differs too: {python}" if python else "") if x)
    return replace(c, key=group.key, label=f"{group.label} {a} -> {b}", note=note)


def compare_versions(
    points: Sequence[StoredPoint | PointResult], min_effect: float = MIN_EFFECT, target: float | None = None
) -> Comparison:
    """Each configuration's change between consecutive releases among the points, as a Comparison whose sides are
    the older and the next release (the configurations measured at one release only are listed in only_a)."""
    groups, unknown = by_release(points)
    steps: list[PointComparison] = []
    single: list[str] = []
    pythons: list[str] = []
    pairs: list[tuple[PointResult, PointResult]] = []
    for g in groups:
        releases = g.releases()
        if len(releases) < 2:
            single.append(f"{g.label} ({releases[0]})")
            continue
        steps += [step(g, a, b, min_effect, target) for a, b in pairwise(releases)]
        per = dict(g.points)
        pairs += [(per[a], per[b]) for a, b in pairwise(releases)]
        if len({g.python_of(r).rpartition(".")[0] for r in releases} - {""}) > 1:
            each = ", ".join(f"{r} on {g.python_of(r) or '?'}" for r in releases)
            pythons.append(f"{g.label}: its releases ran on different Pythons ({each})")
    warnings = [f"{p}: a change between them may be the Python's as much as the framework's" for p in pythons]
    diffs = {k: v for k, v in identity_differences(pairs).items() if k != "framework_version"}
    if diffs:
        named = "; ".join(f"{k}: {', '.join(a)} -> {', '.join(b)}" for k, (a, b) in diffs.items())
        warnings.append(f"identity keys other than the release differ between releases' points: {named}")
    if unknown:
        warnings.append(f"{unknown} point(s) name no framework release (their worker reported none): left out")
    if not steps:
        warnings.append("no configuration was measured at two releases or more")
    method = (
        "each configuration's points grouped by the framework release they ran (the newest point of each), each "
        "release compared with the one before it as `compare` compares two runs: ratio = throughput of the next "
        f"release / the older one's, its 95% CI by hierarchical bootstrap, Mann-Whitney U on step times, a change "
        f"called when p < {ALPHA}, the CI excludes 1 and |ratio - 1| >= {min_effect:.0%}, and neither side was measured "
        "under contention; 'not enough samples' where the samples could not have shown it"
    )
    return Comparison(OLDER, NEWER, tuple(steps), only_a=tuple(single), warnings=tuple(warnings), method=method)


__all__ = [
    "NEWER",
    "OLDER",
    "Releases",
    "by_release",
    "compare_versions",
    "config_key",
    "config_label",
    "release_of",
    "step",
]
