"""Could two samples of step times have shown a change of a given size at all? Power to detect, for `compare` and
`history`, so that "no significant change" is only said where a change would have been seen.

Two checks, both for the test `analysis/compare.py` uses (Mann-Whitney U, two-sided, at ALPHA):

* **the smallest attainable p**: with m against n samples the test cannot return a p below the one of two
  completely separated samples; SciPy computes it (`scipy.stats.mannwhitneyu` on 0..m-1 against m..m+n-1, the
  method its 'auto' picks for tie-free samples: the exact distribution up to 8 a side). With 4 against 4 it is
  2 / C(8, 4) = 0.029, so at alpha 0.01 no change, however large, can be called.
* **the power for the requested effect** (`--fail-above`, else `--min-effect`): the probability that the test
  calls a change when B's steps are (1 + effect) times A's. The spread of the steps is modelled as log-normal with
  the samples' own robust sigma (1.4826 x the median absolute deviation of log step time, each side about its own
  median, pooled). Up to SIMULATE_UP_TO samples a side, the power is simulated (DRAWS seeded draws of that
  model, each run through the very test); above, Noether's (1987) approximation for the Mann-Whitney test is
  used: power = Phi(|p' - 1/2| sqrt(12 m n / (m + n + 1)) - z(1 - alpha/2)), p' = Phi(ln(1 + effect) /
  (sigma sqrt 2)) the probability that a step of B is slower than one of A.

`needed` is the smallest number of samples per side (both sides equal) at which the smallest attainable p is below
alpha and the power reaches TARGET_POWER, for the spread these samples show. Samples are step times (window means
where steps were timed in windows), the unit the test itself ranks.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

TARGET_POWER = 0.8
SIMULATE_UP_TO = 50  # samples a side up to which the power is simulated rather than approximated
DRAWS = 500
SEED = 0
MAX_NEEDED = 1_000_000


@functools.lru_cache(maxsize=1024)
def min_p(m: int, n: int) -> float:
    """The smallest two-sided Mann-Whitney p-value SciPy can return for m against n tie-free samples."""
    if m < 1 or n < 1:
        return 1.0
    return float(sps.mannwhitneyu(np.arange(m), np.arange(m, m + n), alternative="two-sided").pvalue)


def _min_n_for_alpha(alpha: float) -> int:
    """Samples per side (equal sides) for which the smallest attainable p is below alpha."""
    n = 1
    while min_p(n, n) >= alpha:
        n += 1
    return n


def log_spread(a: np.ndarray, b: np.ndarray) -> float:
    """Robust sigma of log step time: 1.4826 x MAD of each side's log times about its own median, pooled."""
    res = [np.log(np.asarray(x, float).ravel()) - np.median(np.log(np.asarray(x, float))) for x in (a, b) if np.size(x)]
    pooled = np.concatenate(res) if res else np.zeros(1)
    return float(1.4826 * np.median(np.abs(pooled)))


def noether_power(m: int, n: int, p_prime: float, alpha: float) -> float:
    """Noether's approximate power of the two-sided Mann-Whitney test at alpha, m against n samples."""
    if m < 1 or n < 1:
        return 0.0
    z = abs(p_prime - 0.5) * math.sqrt(12.0 * m * n / (m + n + 1)) - float(sps.norm.ppf(1 - alpha / 2))
    return float(sps.norm.cdf(z))


@functools.lru_cache(maxsize=4096)
def power(m: int, n: int, sigma: float, effect: float, alpha: float) -> float:
    """Probability that the two-sided Mann-Whitney test at alpha calls B, (1 + effect) times slower than A, with
    m against n log-normal step times of spread sigma: simulated up to SIMULATE_UP_TO a side, else Noether's."""
    if min_p(m, n) >= alpha:
        return 0.0
    if sigma <= 0:
        return 1.0  # no spread: any change separates the samples completely
    if max(m, n) > SIMULATE_UP_TO:
        return noether_power(m, n, float(sps.norm.cdf(math.log1p(effect) / (sigma * math.sqrt(2)))), alpha)
    rng = np.random.default_rng(SEED)
    a = rng.normal(0.0, sigma, (DRAWS, m))
    b = rng.normal(math.log1p(effect), sigma, (DRAWS, n))
    p = sps.mannwhitneyu(a, b, axis=1, alternative="two-sided").pvalue
    return float(np.mean(p < alpha))


def needed(sigma: float, effect: float, alpha: float, target: float = TARGET_POWER) -> int:
    """Samples per side (equal sides) at which the test reaches alpha and `target` power for this effect."""
    n = _min_n_for_alpha(alpha)
    while n <= SIMULATE_UP_TO:
        if power(n, n, sigma, effect, alpha) >= target:
            return n
        n += 1
    shift = abs(float(sps.norm.cdf(math.log1p(effect) / (sigma * math.sqrt(2)))) - 0.5)
    if shift <= 0:
        return MAX_NEEDED
    need = (float(sps.norm.ppf(1 - alpha / 2)) + float(sps.norm.ppf(target))) ** 2 / (12.0 * shift**2)
    k = math.ceil(2 * need + 1)  # n^2 / (2n + 1) >= need from here on
    while k > n and (k - 1) ** 2 / (2 * (k - 1) + 1) >= need:
        k -= 1
    return min(max(k, n), MAX_NEEDED)


@dataclass(frozen=True)
class Detectability:
    """Whether m against n step times could show a change of `effect` at `alpha`, and how many would."""

    effect: float
    alpha: float
    samples_a: int
    samples_b: int
    min_p: float
    power: float
    sigma: float
    power_required: bool = True  # False: only whether the test can reach alpha at all (no target effect asked)

    @property
    def detectable(self) -> bool:
        """The test can reach alpha with these counts and, where a target effect was asked, has at least
        TARGET_POWER for it."""
        return self.min_p < self.alpha and (not self.power_required or self.power >= TARGET_POWER)

    @property
    def needed(self) -> int:
        """Samples per side that would make the effect detectable (min p < alpha, power >= TARGET_POWER)."""
        return needed(self.sigma, self.effect, self.alpha)

    @property
    def message(self) -> str:
        """'not enough samples to detect 5%: need 5 per side (have 4 and 4; ...)'."""
        if self.min_p >= self.alpha:
            why = (
                f"the smallest p with {self.samples_a} against {self.samples_b} is {self.min_p:.2g}, "
                f"not below alpha {self.alpha:g}"
            )
        else:
            why = (
                f"power {self.power:.0%} at alpha {self.alpha:g} with this spread of step times "
                f"(sigma {self.sigma:.1%})"
            )
        n = self.needed
        need = f"{n:,}" if n < MAX_NEEDED else f"over {MAX_NEEDED:,}"
        return (
            f"not enough samples to detect {self.effect * 100:.3g}%: need {need} per side "
            f"(have {self.samples_a} and {self.samples_b}; {why})"
        )

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able figures (`needed_per_side` only where the effect is not detectable)."""
        return {
            "effect": self.effect,
            "alpha": self.alpha,
            "min_p": self.min_p,
            "power": self.power,
            "log_sigma": self.sigma,
            "detectable": self.detectable,
            "needed_per_side": None if self.detectable else self.needed,
        }


def detectability(
    a: np.ndarray, b: np.ndarray, effect: float, alpha: float, power_required: bool = True
) -> Detectability:
    """How well the step times a and b could show a relative change of `effect` with the Mann-Whitney test;
    power_required=False judges only whether the test can reach alpha with these counts (`needed` still
    counts the samples that would give the effect TARGET_POWER)."""
    m, n = int(np.size(a)), int(np.size(b))
    sigma = round(log_spread(a, b), 6)  # rounded: the power cache sees the same spread as the same
    return Detectability(effect, alpha, m, n, min_p(m, n), power(m, n, sigma, effect, alpha), sigma, power_required)


__all__ = [
    "MAX_NEEDED",
    "TARGET_POWER",
    "Detectability",
    "detectability",
    "log_spread",
    "min_p",
    "needed",
    "noether_power",
    "power",
]
