"""The verdict of a convergence run (issues #34, #44), framework-free: a loss curve and the independent evaluation
of its weights (dlbench/evaluate.py) judged against a target and reference convergence points.

Verdicts, in the order they are decided:
- `impossible`: a reading of the training loss, or the held-out loss of the evaluated weights, is below the best
  loss the data allows (the Markov source's entropy rate, the planted logistic's Bayes loss ...): the trainer
  reports a loss it cannot have;
- `diverged`: a reading is NaN or Inf, or the curve ends above where it started, or a reading rises above
  DIVERGE_FACTOR x its start;
- `not reached`: the curve said the target was reached but the evaluated weights there are above it (by more than
  EVAL_TOLERANCE, and by EVAL_SIGMAS standard errors of the held-out sample beyond that), or below the target AUC (decided before the next: a step that flatters its loss flatters the
  curve's start too);
- `diverged`: the weights at the end of the point (after its timed steps) evaluate to a loss that is not finite
  or above where the curve started;
- `interrupted`: stopped by the user before the target, its curve so far kept;
- `not reached`: the step budget was spent;
- `slower`: the target was reached in significantly more steps than the reference's (a one-sided t-test at
  p = 0.05, analysis/olympic.py);
- `converged`: reached, not significantly slower; marked `faster` (`converged*`, faster than reference: suspect,
  as MLPerf rejects it) when significantly fewer steps.

Time to target over several runs is scored the MLPerf way where there are at least MLPERF_MIN_RUNS (drop the
fastest and the slowest, mean of the rest), and says what it did otherwise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dlbench.analysis.olympic import ALPHA, acceptance, ttest
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult

Verdict = Literal["converged", "slower", "diverged", "not reached", "interrupted", "impossible"]
VERDICTS: tuple[Verdict, ...] = ("converged", "slower", "diverged", "not reached", "interrupted", "impossible")
DIVERGE_FACTOR = 2.0
FLOOR_MARGIN = 0.1  # nats: a training reading this far below the data's best loss cannot be sampling noise
FLOOR_SIGMAS = 4.0  # a held-out loss this many standard errors below the Bayes loss on the same examples
MLPERF_MIN_RUNS = 5
CURVE_KEY = "convergence_curve"  # the worker's fact in a point's extra: the curve and its target
VERDICT_KEY = "convergence"  # the controller's: the judgement, the target, the seed and the reference
REFERENCE_KEY = "convergence_reference"  # True on a reference run
EVAL_TOLERANCE = 0.5  # of the distance from the data's best loss to the target (eval_tolerance)
EVAL_MIN_TOLERANCE = 0.05  # nats
# Standard errors of the held-out mean beyond the tolerance before weights are said not to be at the target: 256
# held-out images give a heavy-tailed mean (ResNet-50 reference weights at the target scored 0.42 +- 0.08).
EVAL_SIGMAS = 2.0
EVAL_KEY = "convergence_eval"  # the independent evaluation's facts (dlbench/evaluate.py), per checkpoint


@dataclass(frozen=True)
class Reference:
    """Steps to target of the reference runs (a shipped reference convergence point, or torch fp32 runs measured
    here) and what they were."""

    steps: tuple[int, ...]
    every: int
    seeds: tuple[int, ...] = ()
    label: str = "torch fp32 1 device"
    wall_s: tuple[float, ...] = ()  # wall time to target of each run (scored by score_times)
    source: str = "local"  # 'shipped FILE' or 'local' (runs measured in this store)
    framework_version: str = ""
    notes: tuple[str, ...] = ()  # what the verdict must say about it (another framework version, a suspect one)

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
    def band(self) -> tuple[float, float]:
        """(lower, upper) steps to target of one run that read neither faster nor slower (the t-tests' edges)."""
        if len(self.steps) < 2:
            return (0.0, math.inf)
        return acceptance(self.steps, self.every, 1)

    def describe(self) -> str:
        """One line: what the reference is, its runs and the edges of one run's verdict."""
        lo, hi = self.band
        score = score_times(list(self.wall_s))
        timed = f"; {score.value:.1f} s to target ({score.method})" if score is not None else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return (
            f"{self.label} ({self.source}), {len(self.steps)} run(s): {self.mean:.0f} ± {self.spread:.0f} steps to "
            f"target; one run reads slower above {hi:.0f}, faster below {lo:.0f} (t-test, p = {ALPHA:g}){timed}{notes}"
        )

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict, with the edges it implies."""
        lo, hi = self.band
        return {
            **asdict(self),
            "mean": self.mean,
            "spread": self.spread,
            "band": [lo, hi if math.isfinite(hi) else None],
        }


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
    evaluation: dict[str, object] | None = None  # the held-out loss of the weights at the target and at the end
    ttest: dict[str, object] | None = None  # the one-run t-test against the reference (p-values)
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


@dataclass(frozen=True)
class Floor:
    """What the data allows: its best possible loss, and the AUC a converged run must show where it has one."""

    best: float | None = None
    auc: float | None = None


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


def _checkpoints(evaluation: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The evaluated checkpoints ('target', 'end') that hold a loss."""
    if not evaluation:
        return []
    return [(k, v) for k in ("target", "end") if isinstance(v := evaluation.get(k), dict) and "loss" in v]


def _held_out(ev: dict[str, Any]) -> float:
    """A checkpoint's held-out loss; NaN where it was not finite (strict JSON keeps a NaN as null)."""
    loss = ev.get("loss")
    return float(loss) if isinstance(loss, (int, float)) else math.nan


def below_floor(curve: Curve, floor: Floor, evaluation: dict[str, Any] | None) -> str | None:
    """Why a loss is below what the data allows (one line), or None: a training reading more than FLOOR_MARGIN
    below the best loss, or a held-out loss FLOOR_SIGMAS standard errors below the Bayes loss of its examples."""
    if floor.best is not None:
        low = [(i, v) for i, v in enumerate(curve.losses) if math.isfinite(v) and v < floor.best - FLOOR_MARGIN]
        if low:
            i, v = low[0]
            return (
                f"the trainer reported loss {v:.4g} at step {curve.read_steps(i)}, below the best loss the data "
                f"allows ({floor.best:.4g}): impossible"
            )
    for name, ev in _checkpoints(evaluation):
        diff, se = ev.get("diff_mean"), ev.get("diff_se")
        if isinstance(diff, (int, float)) and isinstance(se, (int, float)) and diff < -FLOOR_SIGMAS * se - 1e-6:
            return (
                f"held-out loss {ev['loss']:.4g} of the weights at the {name} is below the Bayes loss of the same "
                f"examples ({ev['bayes']:.4g}, by {-diff:.3g} = {-diff / max(se, 1e-12):.1f} standard errors): "
                "impossible"
            )
    return None


def eval_tolerance(target: float, floor: Floor) -> float:
    """How far above the target the held-out loss at the target's weights may lie: EVAL_TOLERANCE of the distance
    from the data's best loss to the target (the training window's mean lags its last weights; the held-out
    examples are a sample), at least EVAL_MIN_TOLERANCE."""
    gap = target - floor.best if floor.best is not None else target
    return max(EVAL_TOLERANCE * gap, EVAL_MIN_TOLERANCE)


def _unconfirmed(target: float, floor: Floor, evaluation: dict[str, Any] | None) -> str | None:
    """Why the evaluated weights at the target do not confirm it (one line), or None."""
    ev = dict(_checkpoints(evaluation)).get("target")
    if ev is None:
        return None
    loss, se = _held_out(ev), ev.get("diff_se")
    limit = target + eval_tolerance(target, floor)
    noise = EVAL_SIGMAS * float(se) if isinstance(se, (int, float)) and math.isfinite(se) else 0.0
    if not math.isfinite(loss) or loss > limit + noise:
        return (
            f"the curve reached {target:g}, but its weights there evaluate to held-out loss {loss:.4g} "
            f"(above {limit:.4g}, the target + {eval_tolerance(target, floor):.3g}, by more than {EVAL_SIGMAS:g} "
            f"standard errors, {se if isinstance(se, (int, float)) else 0:.2g} each)"
        )
    auc = ev.get("auc")
    if floor.auc is not None and isinstance(auc, (int, float)) and auc < floor.auc:
        return f"its weights at the target evaluate to held-out AUC {auc:.4f}, below the target AUC {floor.auc:.4f}"
    return None


def _end_diverged(curve: Curve, evaluation: dict[str, Any] | None) -> str | None:
    """Why the weights at the end of the point (after its timed steps) diverged, or None."""
    ev = dict(_checkpoints(evaluation)).get("end")
    if ev is None or not curve.losses:
        return None
    loss, start = _held_out(ev), curve.losses[0]
    if not math.isfinite(loss) or (math.isfinite(start) and loss > start):
        return (
            f"after its timed steps the weights evaluate to held-out loss {loss:.4g}, above the curve's start "
            f"{start:.4g}"
        )
    return None


def judge(
    curve: Curve,
    target: float,
    reference: Reference | None = None,
    evaluation: dict[str, Any] | None = None,
    floor: Floor = Floor(),
) -> Judgement:
    """The verdict of one curve, and of the independent evaluation of its weights, against a target loss, what the
    data allows and, where there is one, the reference runs (a one-run t-test each way)."""
    final = curve.losses[-1] if curve.losses else math.nan
    start = curve.losses[0] if curve.losses else math.nan
    ref = reference.to_dict() if reference is not None else None
    metric = "loss" if curve.target_auc is None else "auc"
    goal = target if curve.target_auc is None else curve.target_auc

    def make(
        verdict: Verdict,
        hit: tuple[int, float] | None,
        reason: str,
        faster: bool = False,
        test: dict[str, object] | None = None,
    ) -> Judgement:
        steps, wall = hit if hit is not None else (None, None)
        return Judgement(verdict, goal, steps, wall, final, start, faster, reason, ref, evaluation, test, metric)

    why = below_floor(curve, floor, evaluation)
    if why is not None:
        return make("impossible", None, why)
    why = divergence(curve)
    if why is not None:
        return make("diverged", None, why)
    hit = reached(curve, target)
    # The weights where the curve says it reached the target are checked first: the curve's start, which the end's
    # weights are compared with, is the trainer's own word (a step that flatters its loss flatters its start).
    why = _unconfirmed(target, floor, evaluation) if hit is not None and metric == "loss" else None
    if why is None and (end := _end_diverged(curve, evaluation)) is not None:
        return make("diverged", None, end)
    if hit is None:
        best = min(curve.losses, default=math.nan)
        short = f"best loss {best:.4g} > {target:g}"
        if curve.target_auc is not None:
            short = f"best AUC {max(curve.auc, default=math.nan):.4g} < {curve.target_auc:g}"
        return make("interrupted" if curve.interrupted else "not reached", None, f"{curve.steps} steps taken, {short}")
    if why is not None:
        return make("not reached", None, why)
    if reference is None:
        return make("converged", hit, "no reference to judge against: target reached")
    if len(reference.steps) < 2:
        return make("converged", hit, "a reference of one run: no spread to test against; target reached")
    t = ttest([hit[0]], reference.steps, reference.every)
    test: dict[str, object] = {"p_slower": t.p_slower, "p_faster": t.p_faster, "df": t.df, "runs": 1}
    mean = f"the reference's {reference.mean:.0f} ± {reference.spread:.0f}"
    if t.call == "slower":
        return make("slower", hit, f"{hit[0]} steps to target against {mean}: slower (p = {t.p_slower:.3g})", test=test)
    if t.call == "faster":
        why = f"{hit[0]} steps to target against {mean}: faster than reference (p = {t.p_faster:.3g}), suspect"
        return make("converged", hit, why, faster=True, test=test)
    return make("converged", hit, f"{hit[0]} steps to target against {mean}: not significantly different", test=test)


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
        evaluation=raw.get("evaluation"),
        ttest=raw.get("ttest"),
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
            f"{evaluation_line(raw.get('evaluation'))}Reference: {raw.get('reference_line', '-')}"
        )
    if any("*" in verdict_of(r) for r in results):
        out.append("converged* = faster than the reference: suspect (MLPerf rejects such convergence)")
    return out


def evaluation_line(evaluation: object) -> str:
    """'Evaluated: ...' of the independent evaluation (or why there was none), ending with a space; '' without."""
    if not isinstance(evaluation, dict):
        return ""
    if "skipped" in evaluation:
        return f"Not evaluated: {evaluation['skipped']}. "
    parts = []
    for name, ev in _checkpoints(evaluation):
        auc = f", AUC {ev['auc']:.4f}" if isinstance(ev.get("auc"), (int, float)) else ""
        parts.append(f"at the {name} {_held_out(ev):.4g}{auc} (Bayes {float(ev['bayes']):.4g})")
    errors = [f"{k}: {v['error']}" for k, v in evaluation.items() if isinstance(v, dict) and "error" in v]
    said = "; ".join(parts) if parts else "nothing"
    return f"Held-out loss {said}{' (' + '; '.join(errors) + ')' if errors else ''}. "


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
