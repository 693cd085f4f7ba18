"""How a throughput (samples/s, tokens/s) and its spread are written, in the terminal and the report alike: at least
two significant digits (0.12, not 0.1; 0.050, not 0.05 or 0.0), and the spread with the value's own decimals, so
that `0.12 ± 0.01` never reads `0.1 ± 0.0` and `1,234 ± 12` never claims digits the value does not show."""

from __future__ import annotations

import math

MIN_SIGNIFICANT = 2


def rate_decimals(v: float) -> int:
    """The decimals a throughput is written with: none from 1,000, one from 10, two from 1, and below 1 as many as
    give it two significant digits."""
    a = abs(v)
    if not math.isfinite(a) or a >= 1000:
        return 0
    if a >= 10:
        return 1
    if a == 0:
        return 2
    return max(2, MIN_SIGNIFICANT - 1 - math.floor(math.log10(a)))


def fmt_spread(v: float, spread: float) -> str:
    """The spread of throughput v in v's decimals: '0.01' beside 0.12, '12' beside 1,234."""
    return f"{spread:,.{rate_decimals(v)}f}"


def fmt_rate(v: float, spread: float | None = None) -> str:
    """'1,234', '43.3', '2.20', '0.12', '0.050'; with a spread, '0.12 ± 0.01' in the value's decimals."""
    text = f"{v:,.{rate_decimals(v)}f}"
    return text if spread is None else f"{text} ± {fmt_spread(v, spread)}"


__all__ = ["MIN_SIGNIFICANT", "fmt_rate", "fmt_spread", "rate_decimals"]
