"""Is run B faster or slower than run A, or only noisier? A verdict per matching point, from the raw samples.

Points match on `PointSpec.key()` (the configuration without protocol and timeout). For each pair:

* samples: the mean step time of every timed window (of every step, where steps were timed one by one), per
  repeat, taking the slowest rank at each window (the same wall time that defines throughput in
  protocol/stats.py);
* ratio: throughput B / throughput A = (global batch / mean step time of B) / (same for A), the mean step time
  being the measured wall time over the measured steps;
* confidence interval of the ratio: a hierarchical bootstrap in numpy. Each resample draws repeats with
  replacement, then steps with replacement within each drawn repeat, so that a difference between repeats
  (a machine that was busy during one of them) widens the interval instead of hiding in many steps;
* test: Mann-Whitney U (scipy) on the step times, two-sided.

A change is called only when all three agree: p < ALPHA, the interval excludes 1, and the ratio moves by at
least MIN_EFFECT, and never when either point was measured under contention (machine/telemetry.py: others held the
cores its threads needed, or its GPU was busy): its verdict is "contended: no verdict", the contention named. Anything less is "no significant change", but only where a change could have been seen
(analysis/statistical_power.py): when the test cannot reach p < ALPHA with these sample counts (4 against 4 step times: the
smallest p is 0.029), or, for a target effect (`--fail-above`), has less than 80% power to detect it, the verdict
is "not enough samples", with the number of samples per side that would do. Each side's MFU (analysis/mfu.py) is shown beside,
with the peak it divides by; it plays no part in the verdict. Identity keys that differ between the runs are
reported as warnings naming each key; they never block the comparison silently or pass unnoticed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from dlbench.analysis.convergence import verdict_changes
from dlbench.analysis.mfu import Efficiency, efficiency
from dlbench.analysis.statistical_power import detectability
from dlbench.analysis.variants import case_param_names, variant_labels
from dlbench.jsonout import strict_dumps
from dlbench.machine.telemetry import telemetry_of
from dlbench.records import PointResult
from dlbench.store.store import StoredPoint

ALPHA = 0.01
MIN_EFFECT = 0.02
CI_LEVEL = 0.95
RESAMPLES = 2000
SEED = 0  # the bootstrap is seeded, so that the same two runs always get the same verdict

FASTER, SLOWER, SAME = "faster", "slower", "no significant change"
UNDETECTABLE = "not enough samples"  # the test could not have called the requested change with these samples
CONTENDED = "contended: no verdict"  # a side was measured while others held its cores (or its GPU): noise, not change


@dataclass(frozen=True)
class PointComparison:
    """One configuration measured in both runs, and what changed."""

    key: str
    label: str
    status_a: str
    status_b: str
    throughput_a: float | None = None
    throughput_b: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    samples_a: int = 0
    samples_b: int = 0
    verdict: str = SAME
    note: str = ""
    mfu_a: float | None = None
    mfu_b: float | None = None
    peak_a: str = ""  # the peak MFU divides by, or why it is unknown
    peak_b: str = ""
    min_p: float | None = None  # the smallest p the test can return with these sample counts
    power: float | None = None  # to detect the target effect (--fail-above, else --min-effect) at ALPHA
    needed_per_side: int | None = None  # samples per side that would detect it, where these could not
    contended: str = ""  # the sides measured under contention: "A", "B" or "A and B" (verdict CONTENDED)

    @property
    def change(self) -> float | None:
        """Relative change of throughput, B vs A (-0.2 is 20% slower)."""
        return None if self.ratio is None else self.ratio - 1.0


@dataclass(frozen=True)
class Comparison:
    """Every matching point of two runs, the points found in one run only, and the warnings."""

    run_a: str
    run_b: str
    points: tuple[PointComparison, ...]
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    identity_diffs: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    method: str = ""

    def regressions(self, threshold: float) -> list[PointComparison]:
        """Points significantly slower in B by more than threshold (0.05 = 5%)."""
        return [p for p in self.points if p.verdict == SLOWER and p.change is not None and -p.change > threshold]

    def undetectable(self) -> list[PointComparison]:
        """Points whose samples could not have shown the requested change (verdict 'not enough samples')."""
        return [p for p in self.points if p.verdict == UNDETECTABLE]

    def contended(self) -> list[PointComparison]:
        """Points with no verdict because a side was measured under contention."""
        return [p for p in self.points if p.verdict == CONTENDED]

    def to_json(self) -> str:
        """The comparison as JSON, every figure included."""
        d = asdict(self)
        d["identity_diffs"] = {k: {"a": a, "b": b} for k, (a, b) in self.identity_diffs.items()}
        for p, pc in zip(d["points"], self.points):
            p["change"] = pc.change
        return strict_dumps(d, indent=2)


def label(r: PointResult) -> str:
    """A short human name for a configuration: 'torch resnet50 bs32 fp32 1n1c' (case parameters after the model:
    'torch wide_deep vocab=3200000 bs16384 ...', or two vocabularies would read alike)."""
    s = r.spec
    parts = [
        s.framework_label,
        s.model,
        *(f"{k}={v}" for k, v in s.case_params),
        f"bs{s.batch_size}",
        s.precision,
        s.scale,
    ]
    if s.compile:
        parts.append("compile")
    if s.channels_last:
        parts.append("channels-last")
    if s.data != "synthetic":
        parts.append(s.data)
    if s.strategy != "none":
        parts.append(s.strategy)
    if s.device != "cpu":
        parts.append(s.device)
    return " ".join(parts)


# The configuration fields label() names (and the case parameters a point sets).
LABEL_FIELDS = frozenset(
    {
        "framework",
        "release",
        "model",
        "batch_size",
        "precision",
        "nodes",
        "devices_per_node",
        "compile",
        "channels_last",
        "data",
        "strategy",
        "device",
    }
)


def distinct_labels(results: Sequence[PointResult]) -> list[str]:
    """label() of each result, followed by what sets it apart from the others that label() does not say
    ('torch resnet50 bs8 fp32 1n1c input_size=64 threads=auto(1)'), so that no two read alike (#42)."""
    shown = LABEL_FIELDS | frozenset().union(*(case_param_names(r) for r in results))
    return [label(r) + (f" {v}" if v else "") for r, v in zip(results, variant_labels(results, shown))]


def step_matrix(r: PointResult) -> np.ndarray:
    """Per-step time samples as a (repeats, windows) array, the slowest rank at each window; empty when not
    comparable."""
    if not r.ranks or not all(rank.repeats for rank in r.ranks):
        return np.empty((0, 0))
    try:
        per_rank = np.array([[rep.step_samples for rep in rank.repeats] for rank in r.ranks], dtype=float)
    except ValueError:  # ragged: ranks or repeats measured different numbers of steps
        return np.empty((0, 0))
    if per_rank.ndim != 3 or per_rank.size == 0:
        return np.empty((0, 0))
    return np.asarray(per_rank.max(axis=0))


def mean_step_time(r: PointResult) -> float:
    """Measured wall time over measured steps, the slowest rank in each repeat (the throughput definition)."""
    walls = [max(rank.repeats[i].wall_s for rank in r.ranks) for i in range(len(r.ranks[0].repeats))]
    return sum(walls) / sum(rep.steps for rep in r.ranks[0].repeats)


def _boot_means(m: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """Mean step time of n hierarchical resamples: repeats with replacement, then steps within each."""
    reps, steps = m.shape
    out = np.empty(n)
    chunk = max(1, 2_000_000 // max(1, reps * steps))
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        ri = rng.integers(0, reps, size=(k, reps))
        si = rng.integers(0, steps, size=(k, reps, steps))
        out[start : start + k] = m[ri[..., None], si].mean(axis=(1, 2))
    return out


def ratio_ci(
    a: np.ndarray, b: np.ndarray, level: float = CI_LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """Percentile interval of mean step time A / mean step time B (= throughput B / A), hierarchical bootstrap."""
    rng = np.random.default_rng(seed)
    ratios = _boot_means(a, rng, resamples) / _boot_means(b, rng, resamples)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def verdict(
    ratio: float, ci: tuple[float, float], p_value: float, alpha: float = ALPHA, min_effect: float = MIN_EFFECT
) -> str:
    """faster / slower only when p < alpha, the interval excludes 1 and the change is at least min_effect."""
    significant = p_value < alpha and not (ci[0] <= 1.0 <= ci[1]) and abs(ratio - 1.0) >= min_effect
    if not significant:
        return SAME
    return FASTER if ratio > 1.0 else SLOWER


def contention_of(r: PointResult) -> str:
    """Why a point's figure is not a result ('others used 86% of its 2 CPUs (load 7.10)'), '' when it is not
    flagged (or was stored before contention was recorded)."""
    t = telemetry_of(r)
    if t is None or not t.flagged:
        return ""
    return t.contention.describe() if t.contention.flagged else "its GPU(s) were busy before it started"


def contention_note(a: PointResult, b: PointResult) -> str:
    """'A: others used 86% of its 2 CPUs; B: ...' for the contended sides, '' when neither was."""
    return "; ".join(f"{side}: {why}" for side, why in (("A", contention_of(a)), ("B", contention_of(b))) if why)


def _peak_text(e: Efficiency) -> str:
    """The peak an MFU divides by ('; above peak' where the achieved FLOP/s exceed it), or why it is unknown."""
    return (e.peak.label + ("; above peak" if e.above_peak else "")) if e.peak else e.note


def compare_points(
    a: PointResult, b: PointResult, min_effect: float = MIN_EFFECT, target: float | None = None
) -> PointComparison:
    """The ratio B/A of one configuration, its interval, the Mann-Whitney p-value and the verdict; 'not enough
    samples' where the test could not have called a change of `target` (with its power), or of min_effect
    (the smallest p only) when no target is given."""
    ea, eb = efficiency(a), efficiency(b)
    head = PointComparison(
        key=a.spec.key(),
        label=label(a),
        status_a=a.status,
        status_b=b.status,
        throughput_a=a.metrics.throughput if a.metrics else None,
        throughput_b=b.metrics.throughput if b.metrics else None,
        mfu_a=ea.mfu,
        mfu_b=eb.mfu,
        peak_a=_peak_text(ea),
        peak_b=_peak_text(eb),
    )
    if a.status != "ok" or b.status != "ok":
        return replace(head, verdict="not comparable", note=f"status {a.status} -> {b.status}")
    ma, mb = step_matrix(a), step_matrix(b)
    head = replace(head, samples_a=int(ma.size), samples_b=int(mb.size))
    if ma.size == 0 or mb.size == 0:
        return replace(head, verdict="not comparable", note="no step samples (ranks or repeats of unequal length)")
    ratio = float((b.spec.global_batch / mean_step_time(b)) / (a.spec.global_batch / mean_step_time(a)))
    lo, hi = ratio_ci(ma, mb)
    if np.array_equal(np.sort(ma, axis=None), np.sort(mb, axis=None)):
        p = 1.0  # identical samples: Mann-Whitney's normal approximation would still return a number
    else:
        # scipy.stats takes about a second to import: only where a comparison is made
        from scipy.stats import mannwhitneyu

        p = float(mannwhitneyu(ma.ravel(), mb.ravel(), alternative="two-sided").pvalue)
    called = verdict(ratio, (lo, hi), p, min_effect=min_effect)
    det = detectability(ma, mb, target if target is not None else min_effect, ALPHA, power_required=target is not None)
    head = replace(
        head,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        p_value=p,
        min_p=det.min_p,
        power=det.power if target is not None else None,
    )
    contended = contention_note(a, b)
    if contended:  # the figures are kept; no verdict is drawn from them
        sides = " and ".join(side for side, r in (("A", a), ("B", b)) if contention_of(r))
        return replace(head, verdict=CONTENDED, note=contended, contended=sides)
    if called == SAME and not det.detectable:
        return replace(head, verdict=UNDETECTABLE, note=det.message, needed_per_side=det.needed)
    return replace(head, verdict=called)


def identity_differences(pairs: list[tuple[PointResult, PointResult]]) -> dict[str, tuple[list[str], list[str]]]:
    """Identity keys that differ within matched pairs: key -> (values in A, values in B) of those pairs."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for a, b in pairs:
        for k in sorted(set(a.env.identity) | set(b.env.identity)):
            va, vb = a.env.identity.get(k, "(absent)"), b.env.identity.get(k, "(absent)")
            if va != vb:
                sa, sb = out.setdefault(k, (set(), set()))
                sa.add(va)
                sb.add(vb)
    return {k: (sorted(sa), sorted(sb)) for k, (sa, sb) in sorted(out.items())}


def _protocol_warnings(pairs: list[tuple[PointResult, PointResult]]) -> list[str]:
    diff = sorted({label(a) for a, b in pairs if a.spec.protocol != b.spec.protocol})
    if not diff:
        return []
    return [(f"the protocol (warm-up, steps, repeats or statistic) differs for {len(diff)} point(s), e.g. {diff[0]}")]


def _order(r: PointResult) -> tuple[object, ...]:
    s = r.spec
    return (s.framework, s.model, s.precision, s.data, s.world_size, s.batch_size, label(r))


def compare_runs(
    run_a: str,
    points_a: list[StoredPoint],
    run_b: str,
    points_b: list[StoredPoint],
    min_effect: float = MIN_EFFECT,
    target: float | None = None,
) -> Comparison:
    """Compare every point of run B with the point of run A that has the same configuration key (`target`: the
    change the samples must be able to detect, e.g. --fail-above's)."""
    by_a = {p.result.spec.key(): p.result for p in points_a}  # a later point of a key wins (a re-run)
    by_b = {p.result.spec.key(): p.result for p in points_b}
    pairs = [(by_a[k], by_b[k]) for k in by_a if k in by_b]
    pairs.sort(key=lambda ab: _order(ab[0]))
    keyed = {**by_b, **by_a}  # A's point where both have the key
    names = dict(zip(keyed, distinct_labels(list(keyed.values()))))
    matched = [replace(compare_points(a, b, min_effect, target), label=names[a.spec.key()]) for a, b in pairs]
    diffs = identity_differences(pairs)
    warnings = []
    if diffs:
        named = "; ".join(f"{k}: {', '.join(a)} -> {', '.join(b)}" for k, (a, b) in diffs.items())
        warnings.append(f"identity keys differ, so these runs were not measured in the same environment: {named}")
    warnings += _protocol_warnings(pairs)
    warnings += verdict_changes(pairs)  # a faster configuration that no longer trains (#34)
    if not pairs:
        warnings.append("the runs have no configuration in common")
    method = (
        f"ratio = throughput B / A from mean step times; {CI_LEVEL:.0%} CI by hierarchical bootstrap "
        f"({RESAMPLES} resamples of repeats, then steps); Mann-Whitney U on step times; a change is "
        f"called when p < {ALPHA}, the CI excludes 1 and |ratio - 1| >= {min_effect:.0%}, and neither side was "
        f"measured under contention ('{CONTENDED}' otherwise); 'not enough "
        f"samples' where the smallest attainable p is not below {ALPHA}"
        + (
            f" or the power to detect {target * 100:.3g}% is under 80% (log-normal spread of the steps, simulated "
            f"or Noether's approximation)"
            if target is not None
            else ""
        )
    )
    return Comparison(
        run_a=run_a,
        run_b=run_b,
        points=tuple(matched),
        only_a=tuple(names[r.spec.key()] for r in sorted((by_a[k] for k in by_a if k not in by_b), key=_order)),
        only_b=tuple(names[r.spec.key()] for r in sorted((by_b[k] for k in by_b if k not in by_a), key=_order)),
        identity_diffs=diffs,
        warnings=tuple(warnings),
        method=method,
    )
