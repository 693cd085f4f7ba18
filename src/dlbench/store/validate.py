"""What a stored point's JSON may hold, field by field: the readers' guard and `--verify`'s reasons.

A value of the wrong type or a non-finite figure (a throughput stored as a string, or as Infinity) makes the
point `invalid` for every reader, which then shows it as such with its id instead of crashing on it; `--verify`
says which field is wrong and also names fields no dlbench writes (a tampered or foreign row).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from dlbench.records import STATUSES, Metrics, RankRaw, RepeatRaw

INVALID = "invalid"  # the status readers show for a row they cannot trust; never written to a store

_FINITE = ("throughput", "ci_level", "median_step_s", "input_wait_share")
_SPREAD = ("ci_low", "ci_high", "cv")  # null below MIN_REPEATS_FOR_SPREAD repeats (schema.Metrics)
_COUNTS = ("global_batch", "measured_steps")
_OPTIONAL_COUNTS = ("peak_memory_bytes", "allocator_peak_bytes")
_FLAGS = ("input_bound",)
_TEXTS = ("statistic", "memory_kind", "timing", "allocator_kind")
_SECONDS = ("step_times", "window_s", "device_step_s")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: object) -> bool:
    return _number(v) and math.isfinite(v)  # type: ignore[arg-type]


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _what(v: object) -> str:
    return repr(v)[:40] if _number(v) else f"a {type(v).__name__}"


def metric_problems(d: Mapping[str, object]) -> list[str]:
    """Why stored metrics cannot be shown as figures (empty when they can)."""
    required = [f.name for f in dataclasses.fields(Metrics) if f.default is dataclasses.MISSING]
    out = [f"metrics lack {k}" for k in required if k not in d]
    out += [f"{k} is {_what(d[k])}, not a finite number" for k in _FINITE if k in d and not _finite(d[k])]
    reps = d.get("repeat_throughputs", [])
    if not isinstance(reps, (list, tuple)) or not all(_finite(x) for x in reps):
        out.append("repeat_throughputs is not a list of finite numbers")
    out += [f"{k} is {_what(d[k])}, not a whole number" for k in _COUNTS if k in d and not _count(d[k])]
    out += [
        f"{k} is {_what(d[k])}, not a whole number"
        for k in _OPTIONAL_COUNTS
        if d.get(k) is not None and not _count(d[k])
    ]
    out += [f"{k} is {_what(d[k])}, not a finite number" for k in _SPREAD if d.get(k) is not None and not _finite(d[k])]
    out += [f"{k} is {_what(d[k])}, not true or false" for k in _FLAGS if k in d and not isinstance(d[k], bool)]
    if d.get("noisy") is not None and not isinstance(d["noisy"], bool):  # null: too few repeats to tell
        out.append(f"noisy is {_what(d['noisy'])}, not true, false or unknown")
    out += [f"{k} is {_what(d[k])}, not text" for k in _TEXTS if k in d and not isinstance(d[k], str)]
    for k in ("final_loss", "device_median_step_s"):
        if d.get(k) is not None and not _finite(d[k]):
            out.append(f"{k} is {_what(d[k])}, not a finite number")
    return out


def rank_problems(ranks: list[object]) -> list[str]:
    """Why stored raw samples cannot be read as times (empty when they can). A rank's loss or checksum may be
    non-finite: that is what a failed check records."""
    out: list[str] = []
    for r in ranks:
        if not isinstance(r, Mapping) or not isinstance(r.get("repeats"), list):
            return ["a rank is not an object with a list of repeats"]
        if not _count(r.get("rank")):
            out.append(f"rank id {_what(r.get('rank'))} is not a whole number")
        for k in ("peak_memory_bytes", "allocator_peak_bytes"):
            if r.get(k) is not None and not _count(r[k]):
                out.append(f"rank {r.get('rank')} {k} is {_what(r[k])}, not a whole number")
        for k in ("final_loss", "param_checksum"):
            if r.get(k) is not None and not _number(r[k]):
                out.append(f"rank {r.get('rank')} {k} is {_what(r[k])}, not a number")
        if "input_wait_s" in r and not _finite(r["input_wait_s"]):
            out.append(f"rank {r.get('rank')} input_wait_s is {_what(r['input_wait_s'])}, not a finite number")
        for rep in r["repeats"]:
            if not isinstance(rep, Mapping) or not _finite(rep.get("wall_s")) or rep["wall_s"] < 0:
                out.append(f"rank {r.get('rank')}: a repeat's wall_s is not a finite number of seconds")
                continue
            for k in _SECONDS:
                v = rep.get(k, [])
                if not isinstance(v, list) or not all(_finite(x) and x >= 0 for x in v):
                    out.append(f"rank {r.get('rank')}: a repeat's {k} is not a list of finite seconds")
            if not all(_count(x) for x in rep.get("window_steps", []) or []):
                out.append(f"rank {r.get('rank')}: a repeat's window_steps is not a list of whole numbers")
    return out


def status_problems(status: object, has_metrics: bool) -> list[str]:
    """A status no dlbench writes, or metrics on a point that did not end ok (metrics exist for ok points)."""
    if status not in STATUSES:
        return [f"status {status!r} is not one dlbench writes"]
    if has_metrics and status != "ok":
        return [f"status {status} with metrics stored (only an ok point has metrics: a changed status?)"]
    return []


def unknown_fields(metrics: Mapping[str, object] | None, ranks: list[object]) -> list[str]:
    """Fields of the metrics, ranks and repeats that no dlbench writes (an added field)."""
    known_m = {f.name for f in dataclasses.fields(Metrics)}
    known_r = {f.name for f in dataclasses.fields(RankRaw)}
    known_rep = {f.name for f in dataclasses.fields(RepeatRaw)}
    out = [f"metrics field {k!r} is not one dlbench writes" for k in sorted(set(metrics or {}) - known_m)]
    for r in ranks:
        if isinstance(r, Mapping):
            out += [f"rank field {k!r} is not one dlbench writes" for k in sorted(set(r) - known_r)]
            for rep in r.get("repeats") or []:
                if isinstance(rep, Mapping):
                    out += [f"repeat field {k!r} is not one dlbench writes" for k in sorted(set(rep) - known_rep)]
    return sorted(set(out))


__all__ = ["INVALID", "metric_problems", "rank_problems", "status_problems", "unknown_fields"]
