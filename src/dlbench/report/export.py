"""Machine-readable exports: JSON with every raw sample, and a tidy one-row-per-point CSV.

Both give a multi-device point's speedup, scaling efficiency and the id of the 1-device point they were
measured against (analysis/scaling.py picks it, from `pool`: every stored point, since it may come from
another run); empty / null where there is none. Both give each point's training FLOPs per sample, achieved
TFLOP/s, the device peak of its math mode (datasheet or measured) and MFU (analysis/mfu.py), derived on export,
and where and when it was measured (point uid, measured_at in ISO 8601, host, dlbench's git commit), with its
`dlbench reproduce UID` command and the command line that made it (store/request.py). A point
with fewer than 3 repeats has no ci_low, ci_high, cv or noisy (null / empty), never a zero-width interval.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Sequence

from dlbench.analysis.llm import llm_figures
from dlbench.analysis.mfu import efficiency
from dlbench.analysis.scaling import Scaled, scaled
from dlbench.jsonout import strict_dumps
from dlbench.records import PointResult
from dlbench.report.telemetry import CSV_FIELDS as TELEMETRY_FIELDS
from dlbench.report.telemetry import telemetry_fields
from dlbench.store.request import reproduce_command, request_of
from dlbench.store.store import StoredPoint

CSV_COLUMNS: tuple[str, ...] = (
    "run_id",
    "point_id",
    "point_uid",
    "measured_at",
    "host",
    "commit",
    "reproduce",
    "command",
    "framework",
    "framework_version",
    "model",
    "case_params",
    "batch_size",
    "global_batch",
    "precision",
    "compile",
    "channels_last",
    "device",
    "device_model",
    "data",
    "nodes",
    "devices_per_node",
    "world_size",
    "strategy",
    "launcher",
    "preset",
    "warmup",
    "steps",
    "repeats",
    "statistic",
    "status",
    "throughput",
    "ci_low",
    "ci_high",
    "cv",
    "noisy",
    "median_step_s",
    "peak_memory_bytes",
    "memory_kind",
    "final_loss",
    "input_wait_share",
    "speedup",
    "scaling_efficiency",
    "baseline_point_id",
    "math_mode",
    "train_flops_per_sample",
    "achieved_tflops",
    "peak_tflops_per_device",
    "peak_kind",
    "mfu",
    "peak_note",
    "error",
    *TELEMETRY_FIELDS,
)


def provenance(p: StoredPoint) -> dict[str, str | None]:
    """Where and when a point was measured: its global id, its start as ISO 8601 (UTC), the host, dlbench's
    git commit, the command that shows and re-measures it
    (`dlbench reproduce UID`) and the command line that made it (None where unknown)."""
    r = p.result
    when = (
        datetime.datetime.fromtimestamp(r.started, datetime.timezone.utc).isoformat(timespec="seconds")
        if r.started
        else None
    )
    req = request_of(r)
    return {
        "point_uid": p.uid or None,
        "measured_at": when,
        "host": r.env.descriptive.get("hostname") or None,
        "commit": r.env.descriptive.get("git_commit") or None,
        "reproduce": reproduce_command(p.uid, 0) if p.uid else None,
        "command": (req.command or None) if req else None,
    }


def _scaling(p: StoredPoint, pool: Sequence[StoredPoint]) -> dict[str, float | int | None]:
    sc: Scaled | None = scaled(pool, p.result)
    if sc is None:
        return {"speedup": None, "scaling_efficiency": None, "baseline_point_id": None}
    return {
        "speedup": sc.scaling.speedup,
        "scaling_efficiency": sc.scaling.efficiency,
        "baseline_point_id": sc.baseline.id,
    }


def to_json(points: list[StoredPoint], pool: Sequence[StoredPoint] = ()) -> str:
    """Every point in full: spec, status, raw step times of every rank and repeat, metrics, environment,
    and its scaling against a 1-device point of `pool` (or of `points`)."""
    every = pool or points
    return strict_dumps(
        [
            {
                "run_id": p.run_id,
                "point_id": p.id,
                **provenance(p),
                **p.result.to_dict(),
                "scaling": _scaling(p, every),
                "efficiency": efficiency(p.result).as_dict(),
                "telemetry_summary": telemetry_fields(p.result, None),
                "llm": _llm(p.result),
            }
            for p in points
        ],
        indent=2,
    )


def _llm(r: PointResult) -> dict[str, object] | None:
    """A decoder point's tokens/s, TFLOP/s and MFU figures with their FLOP convention (analysis/llm.py)."""
    figures = llm_figures(r)
    return figures.as_dict() if figures else None


def csv_row(p: StoredPoint, pool: Sequence[StoredPoint] = ()) -> dict[str, object]:
    """One tidy row: one column per field, numbers as numbers, empty where not applicable."""
    r, s, m = p.result, p.result.spec, p.result.metrics
    sc = {k: "" if v is None else v for k, v in _scaling(p, pool or [p]).items()}
    e = efficiency(r)
    eff = {
        "math_mode": e.math_mode,
        "train_flops_per_sample": e.flops_per_sample,
        "achieved_tflops": e.achieved_tflops,
        "peak_tflops_per_device": e.peak.tflops if e.peak else None,
        "peak_kind": e.peak.kind if e.peak else None,
        "mfu": e.mfu,
        "peak_note": "; ".join(t for t in (e.peak.label if e.peak else "", e.note) if t),
    }
    return {
        "run_id": p.run_id,
        "point_id": p.id,
        **{k: v or "" for k, v in provenance(p).items()},
        "framework": s.framework,
        "framework_version": r.env.identity.get("framework_version", ""),
        "model": s.model,
        "case_params": " ".join(f"{k}={v}" for k, v in s.case_params),
        "batch_size": s.batch_size,
        "global_batch": s.global_batch,
        "precision": s.precision,
        "compile": s.compile,
        "channels_last": s.channels_last,
        "device": s.device,
        "device_model": r.env.identity.get("device_model", ""),
        "data": s.data,
        "nodes": s.nodes,
        "devices_per_node": s.devices_per_node,
        "world_size": s.world_size,
        "strategy": s.strategy,
        "launcher": s.launcher,
        "preset": s.protocol.preset,
        "warmup": s.protocol.warmup,
        "steps": s.protocol.steps,
        "repeats": s.protocol.repeats,
        "statistic": s.protocol.statistic,
        "status": r.status,
        "throughput": m.throughput if m else "",
        "ci_low": _blank(m.ci_low if m else None),
        "ci_high": _blank(m.ci_high if m else None),
        "cv": _blank(m.cv if m else None),
        "noisy": _blank(m.noisy if m else None),
        "median_step_s": m.median_step_s if m else "",
        "peak_memory_bytes": m.peak_memory_bytes if m and m.peak_memory_bytes is not None else "",
        "memory_kind": m.memory_kind if m else "",
        "final_loss": m.final_loss if m else "",
        "input_wait_share": m.input_wait_share if m else "",
        **sc,
        **{k: "" if v is None else v for k, v in eff.items()},
        "error": (r.error or "").splitlines()[0] if r.error else "",
        **telemetry_fields(r),
    }


def _blank(v: object) -> object:
    """A CSV cell: empty for None (no figure: a failed point, or too few repeats for a spread)."""
    return "" if v is None else v


def to_csv(points: list[StoredPoint], pool: Sequence[StoredPoint] = ()) -> str:
    """A tidy CSV, one row per point, that pandas.read_csv reads straight."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow(csv_row(p, pool or points))
    return buf.getvalue()
