"""Caveats a point's facts carry that change how its figure reads, though the point measured right: today a
framework's own per-step host read in its loss scaler (TensorFlow's and Paddle's amp), which makes each step
wait for the GPU. The report marks the cells they apply to and says why under the table; `dlbench run` prints
them under its table, so such an amp figure does not read as a slower framework."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.records import PointResult

# The fact keys a backend records for a caveat (their values are the one-line explanation).
CAVEAT_FACTS: tuple[str, ...] = ("amp_host_sync",)


def caveats(result: PointResult) -> list[str]:
    """The caveats recorded on a point, in CAVEAT_FACTS order."""
    return [str(v) for k in CAVEAT_FACTS if (v := result.extra.get(k))]


def caveat_notes(results: Sequence[PointResult]) -> list[str]:
    """One line per framework, precision and caveat among the ok points: 'tf amp: <why>'."""
    seen: dict[str, None] = {}
    for r in results:
        if r.status == "ok":
            for text in caveats(r):
                seen.setdefault(f"{r.spec.framework} {r.spec.precision}: {text}")
    return list(seen)


__all__ = ["CAVEAT_FACTS", "caveat_notes", "caveats"]
