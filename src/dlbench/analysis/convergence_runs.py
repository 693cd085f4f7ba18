"""The verdict over the N runs of one convergence configuration (#44: `--converge-runs N`, seeds seed .. seed+N-1),
the MLPerf way: olympic scoring of their steps to target (fastest and slowest dropped from 3 runs on, at most one
run that did not converge, counted as the slowest), then the one-sided t-tests against the reference's runs each
way, with the power of that test stated. Built from the runs' stored judgements alone (analysis/convergence.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlbench.analysis.convergence import REFERENCE_KEY, VERDICT_KEY
from dlbench.analysis.olympic import ALPHA, EFFECT, olympic, power_line, ttest
from dlbench.records import PointResult

FAILED = ("diverged", "not reached", "interrupted", "impossible")  # a run that did not converge


@dataclass(frozen=True)
class GroupVerdict:
    """The verdict of a configuration's runs and the line that says how it was reached."""

    label: str
    verdict: str
    line: str


def _configuration(r: PointResult) -> str:
    """A run's configuration: its key without the seed."""
    d = r.spec.to_dict()
    d.pop("seed", None)
    return repr(sorted(d.items(), key=lambda kv: kv[0]))


def _reference(raw: dict[str, Any]) -> tuple[tuple[float, ...], int] | None:
    ref = raw.get("reference")
    if not isinstance(ref, dict) or len(ref.get("steps", ())) < 2:
        return None
    return tuple(float(s) for s in ref["steps"]), int(ref.get("every", 1))


def group_verdict(runs: Sequence[PointResult]) -> GroupVerdict | None:
    """The verdict over one configuration's runs (None for a group with no judged run)."""
    judged = [(r, raw) for r in runs if isinstance(raw := r.extra.get(VERDICT_KEY), dict)]
    if not judged:
        return None
    first = judged[0][0].spec
    label = f"{first.framework} {first.model} {first.precision} bs{first.batch_size}"
    seeds = sorted(r.spec.seed for r, _ in judged)
    steps = [raw.get("steps_to_target") if raw["verdict"] not in FAILED else None for _, raw in judged]
    kept = olympic(steps)
    how = kept.describe()
    ref = next((x for _, raw in judged if (x := _reference(raw)) is not None), None)
    power = f"; {power_line(ref[0], ref[1], len(judged), EFFECT)}" if ref is not None else ""
    if not kept.ok:
        worst = next(raw["verdict"] for _, raw in judged if raw["verdict"] in FAILED)
        why = f"{kept.failed} of {len(judged)} runs did not converge (at most one may, from 3 runs)"
        return GroupVerdict(label, worst, f"{label}, seeds {seeds}: {worst}: {why}")
    if ref is None:
        return GroupVerdict(label, "converged", f"{label}, seeds {seeds}: converged ({how}); no reference to test")
    t = ttest(kept.steps, ref[0], ref[1])
    verdict = {"slower": "slower", "faster": "converged*"}.get(t.call, "converged")
    p = t.p_slower if t.call == "slower" else t.p_faster
    said = {"slower": "slower", "faster": "faster than reference (suspect)", "same": "not significantly different"}
    test = f"{t.candidate_mean:.0f} steps against the reference's {t.reference_mean:.0f}"
    sig = f", p = {p:.3g}" if t.call != "same" else f" at p = {ALPHA:g} either way"
    return GroupVerdict(
        label, verdict, f"{label}, seeds {seeds}: {verdict} ({how}: {test}, {said[t.call]}{sig}){power}"
    )


def group_lines(results: Sequence[PointResult]) -> list[str]:
    """One line per convergence configuration run here (reference runs left out): its verdict over its runs."""
    groups: dict[str, list[PointResult]] = defaultdict(list)
    for r in results:
        if isinstance(r.extra.get(VERDICT_KEY), dict) and not r.extra.get(REFERENCE_KEY):
            groups[_configuration(r)].append(r)
    return [g.line for runs in groups.values() if (g := group_verdict(runs)) is not None]
