"""The verdict of a convergence run (issue #34), framework-free: a loss curve judged against a target and a reference.

Verdicts, in the order they are decided:
- `diverged`: a reading is NaN or Inf, or the curve ends above where it started, or a reading rises above
  DIVERGE_FACTOR x its start;
- `converged`: the target was reached within the reference band (or with no reference to judge against: then the
  judgement says so), marked `faster` where it reached it before the band's lower edge (MLPerf treats that as
  suspect);
- `slower`: the target was reached, but after the band's upper edge;
- `interrupted`: stopped by the user before the target, its curve so far kept;
- `not reached`: the step budget was spent.

The band around the reference's mean steps to target is its spread (SPREAD_SIGMAS standard deviations over its
seeds) plus a fixed tolerance (TOLERANCE of the mean) plus one reading interval (a curve is read every K steps, so
steps to target are known to K). Frameworks differ in initialisation and data order; a correct one must not read
`slower` for that, hence a stated band, not a bare significance test.

Time to target over several runs is scored the MLPerf way where there are at least MLPERF_MIN_RUNS (drop the
fastest and the slowest, mean of the rest), and says what it did otherwise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dlbench.protocol.converge import Curve
from dlbench.records import PointResult

Verdict = Literal["converged", "slower", "diverged", "not reached", "interrupted"]
VERDICTS: tuple[Verdict, ...] = ("converged", "slower", "diverged", "not reached", "interrupted")
DIVERGE_FACTOR = 2.0
SPREAD_SIGMAS = 2.0
TOLERANCE = 0.25
MLPERF_MIN_RUNS = 5
CURVE_KEY = "convergence_curve"  # the worker's fact in a point's extra: the curve and its target
VERDICT_KEY = "convergence"  # the controller's: the judgement, the target, the seed and the reference
REFERENCE_KEY = "convergence_reference"  # True on a reference run


@dataclass(frozen=True)
class Reference:
    """Steps to target of the reference runs (torch fp32 on one device, one per seed) and what they were."""

    steps: tuple[int, ...]
    every: int
    seeds: tuple[int, ...] = ()
    label: str = "torch fp32 1 device"
    wall_s: tuple[float, ...] = ()  # wall time to target of each run (scored by score_times)

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a reference needs at least one run that reached the target")

    @property
    def mean(self) -> float:
        """Mean steps to target."""
        return statistics.fmean(self.steps)

    @property
    def spread(self) -> float:
        """Sample standard deviation of the steps to target (0 for one run)."""
        return statistics.stdev(self.steps) if len(self.steps) > 1 else 0.0

    @property
    def half_width(self) -> float:
        """The band's half width: SPREAD_SIGMAS spreads + TOLERANCE x mean + one reading interval."""
        return SPREAD_SIGMAS * self.spread + TOLERANCE * self.mean + self.every

    @property
    def band(self) -> tuple[float, float]:
        """(lower, upper) steps to target a candidate may take and read `converged` unmarked."""
        return (max(0.0, self.mean - self.half_width), self.mean + self.half_width)

    def describe(self) -> str:
        """One line: what the band is and how it was made."""
        lo, hi = self.band
        score = score_times(list(self.wall_s))
        timed = f"; {score.value:.1f} s to target ({score.method})" if score is not None else ""
        return (
            f"{self.label}, {len(self.steps)} run(s): {self.mean:.0f} steps to target, band {lo:.0f}..{hi:.0f} "
            f"(±{SPREAD_SIGMAS:g} sd + {TOLERANCE:.0%} + {self.every} steps){timed}"
        )

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict, with the band it implies."""
        return {**asdict(self), "mean": self.mean, "spread": self.spread, "band": list(self.band)}


@dataclass(frozen=True)
class Judgement:
    """What a convergence run shows: its verdict and the figures it rests on."""

    verdict: Verdict
    target: float
    steps_to_target: int | None
    wall_to_target_s: float | None
    final_loss: float
    start_loss: float
    faster: bool = False
    reason: str = ""
    reference: dict[str, object] | None = None
    metric: str = "loss"  # what `target` is: a loss to reach from above, or an AUC ("auc") from below

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (non-finite losses as strings)."""
        out = asdict(self)
        for key in ("final_loss", "start_loss"):
            if not math.isfinite(out[key]):
                out[key] = str(out[key])
        return out

    @property
    def mark(self) -> str:
        """The verdict as a table shows it: 'converged*' when faster than the reference."""
        return f"{self.verdict}*" if self.faster else self.verdict


def reached(curve: Curve, target: float) -> tuple[int, float] | None:
    """(steps, seconds) at the first reading at or below the target loss (a curve judged by AUC: at or above its
    own AUC target), or None."""
    if curve.target_auc is not None:
        for i, auc in enumerate(curve.auc):
            if math.isfinite(auc) and auc >= curve.target_auc:
                return curve.read_steps(i), curve.wall_s[i]
        return None
    for i, loss in enumerate(curve.losses):
        if math.isfinite(loss) and loss <= target:
            return curve.read_steps(i), curve.wall_s[i]
    return None


def divergence(curve: Curve) -> str | None:
    """Why the curve diverged (one line), or None."""
    bad = next((i for i, v in enumerate(curve.losses) if not math.isfinite(v)), None)
    if bad is not None:
        return f"loss {curve.losses[bad]} at step {curve.read_steps(bad)}"
    if len(curve.losses) < 2:
        return None
    start = curve.losses[0]
    peak = max(curve.losses)
    if peak > DIVERGE_FACTOR * start:
        return f"loss rose to {peak:.4g}, above {DIVERGE_FACTOR:g} x its start {start:.4g}"
    if curve.losses[-1] > start:
        return f"loss ended at {curve.losses[-1]:.4g}, above its start {start:.4g}"
    return None


def judge(curve: Curve, target: float, reference: Reference | None = None) -> Judgement:
    """The verdict of one curve against a target loss (or the AUC target the curve carries) and, where there is
    one, a reference band."""
    final = curve.losses[-1] if curve.losses else math.nan
    start = curve.losses[0] if curve.losses else math.nan
    ref = reference.to_dict() if reference is not None else None
    metric = "loss" if curve.target_auc is None else "auc"
    goal = target if curve.target_auc is None else curve.target_auc

    def make(verdict: Verdict, hit: tuple[int, float] | None, reason: str, faster: bool = False) -> Judgement:
        steps, wall = hit if hit is not None else (None, None)
        return Judgement(verdict, goal, steps, wall, final, start, faster, reason, ref, metric)

    why = divergence(curve)
    if why is not None:
        return make("diverged", None, why)
    hit = reached(curve, target)
    if hit is None:
        best = min(curve.losses, default=math.nan)
        short = f"best loss {best:.4g} > {target:g}"
        if curve.target_auc is not None:
            short = f"best AUC {max(curve.auc, default=math.nan):.4g} < {curve.target_auc:g}"
        return make("interrupted" if curve.interrupted else "not reached", None, f"{curve.steps} steps taken, {short}")
    if reference is None:
        return make("converged", hit, "no reference to judge against: target reached")
    lo, hi = reference.band
    if hit[0] > hi:
        return make("slower", hit, f"{hit[0]} steps to target, above the reference band's {hi:.0f}")
    if hit[0] < lo:
        return make("converged", hit, f"{hit[0]} steps to target, below the reference band's {lo:.0f}", faster=True)
    return make("converged", hit, f"{hit[0]} steps to target, within the reference band {lo:.0f}..{hi:.0f}")


@dataclass(frozen=True)
class Score:
    """Time to target over several runs: the value and how it was scored."""

    value: float
    runs: int
    method: str


def score_times(times: list[float]) -> Score | None:
    """MLPerf's score over >= MLPERF_MIN_RUNS runs (drop the fastest and the slowest, mean of the rest); with fewer,
    the plain mean, saying so; None with no run."""
    if not times:
        return None
    n = len(times)
    if n >= MLPERF_MIN_RUNS:
        kept = sorted(times)[1:-1]
        return Score(statistics.fmean(kept), n, f"MLPerf: mean of {n - 2} runs, fastest and slowest of {n} dropped")
    if n == 1:
        return Score(times[0], 1, "one run: no spread")
    return Score(statistics.fmean(times), n, f"mean of {n} runs (fewer than {MLPERF_MIN_RUNS}: none dropped)")


def from_dict(raw: dict[str, Any]) -> Judgement:
    """A Judgement back from its to_dict form (as kept in a point's extra)."""
    return Judgement(
        verdict=raw["verdict"],
        target=float(raw["target"]),
        steps_to_target=raw.get("steps_to_target"),
        wall_to_target_s=raw.get("wall_to_target_s"),
        final_loss=float(raw["final_loss"]),
        start_loss=float(raw["start_loss"]),
        faster=bool(raw.get("faster", False)),
        reason=str(raw.get("reason", "")),
        reference=raw.get("reference"),
        metric=str(raw.get("metric", "loss")),
    )


def verdict_of(result: PointResult) -> str:
    """The verdict a table shows ('-' for a point without one; 'converged*' when faster than the reference)."""
    raw: Any = result.extra.get(VERDICT_KEY)
    if not isinstance(raw, dict):
        return "-"
    return f"{raw['verdict']}*" if raw.get("faster") else str(raw["verdict"])


def convergence_lines(results: list[PointResult]) -> list[str]:
    """One line per convergence point: verdict, steps and wall time to target, final loss, seed, reference."""
    out = []
    for r in results:
        raw: Any = r.extra.get(VERDICT_KEY)
        if not isinstance(raw, dict):
            continue
        ref = " (reference run)" if r.extra.get(REFERENCE_KEY) else ""
        steps, wall = raw.get("steps_to_target"), raw.get("wall_to_target_s")
        goal = "AUC" if raw.get("metric") == "auc" else "loss"
        reached = (
            f"{steps} steps, {wall:.1f} s to {goal} {raw['target']:g}" if steps is not None else "target not reached"
        )
        out.append(
            f"{r.spec.framework} {r.spec.model} {r.spec.precision} seed {raw.get('seed', r.spec.seed)}{ref}: "
            f"{verdict_of(r)}, {reached}; final loss {float(raw['final_loss']):.4g} ({raw.get('reason', '')}). "
            f"Reference: {raw.get('reference_line', '-')}"
        )
    if any("*" in verdict_of(r) for r in results):
        out.append("converged* = faster than the reference band: suspect (MLPerf rejects such convergence)")
    return out


def verdict_changes(pairs: list[tuple[PointResult, PointResult]]) -> list[str]:
    """One line naming the configurations whose convergence verdict differs between two runs (A -> B), or none."""
    changed = [
        f"{a.spec.framework} {a.spec.model} bs{a.spec.batch_size} {a.spec.precision}: {verdict_of(a)} -> {verdict_of(b)}"
        for a, b in pairs
        if verdict_of(a) != verdict_of(b) and "-" not in (verdict_of(a), verdict_of(b))
    ]
    if not changed:
        return []
    return [f"convergence verdicts differ for {len(changed)} point(s): {'; '.join(changed)}"]
