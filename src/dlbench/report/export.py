"""Machine-readable exports: JSON with every raw sample, and a tidy one-row-per-point CSV."""

from __future__ import annotations

import csv
import io
import json

from dlbench.results.store import StoredPoint

CSV_COLUMNS: tuple[str, ...] = (
    "run_id", "point_id", "framework", "framework_version", "model", "batch_size", "global_batch", "precision",
    "compile", "channels_last", "device", "device_model", "data", "nodes", "devices_per_node", "world_size",
    "strategy", "launcher", "preset", "warmup", "steps", "repeats", "statistic", "status", "throughput",
    "ci_low", "ci_high", "cv", "noisy", "median_step_s", "peak_memory_bytes", "memory_kind", "final_loss",
    "input_wait_share", "error",
)


def to_json(points: list[StoredPoint]) -> str:
    """Every point in full: spec, status, raw step times of every rank and repeat, metrics, environment."""
    return json.dumps([{"run_id": p.run_id, "point_id": p.id, **p.result.to_dict()} for p in points], indent=2)


def csv_row(p: StoredPoint) -> dict[str, object]:
    """One tidy row: one column per field, numbers as numbers, empty where not applicable."""
    r, s, m = p.result, p.result.spec, p.result.metrics
    return {
        "run_id": p.run_id, "point_id": p.id, "framework": s.framework,
        "framework_version": r.env.identity.get("framework_version", ""), "model": s.model,
        "batch_size": s.batch_size, "global_batch": s.global_batch, "precision": s.precision,
        "compile": s.compile, "channels_last": s.channels_last, "device": s.device,
        "device_model": r.env.identity.get("device_model", ""), "data": s.data, "nodes": s.nodes,
        "devices_per_node": s.devices_per_node, "world_size": s.world_size, "strategy": s.strategy,
        "launcher": s.launcher, "preset": s.protocol.preset, "warmup": s.protocol.warmup,
        "steps": s.protocol.steps, "repeats": s.protocol.repeats, "statistic": s.protocol.statistic,
        "status": r.status, "throughput": m.throughput if m else "", "ci_low": m.ci_low if m else "",
        "ci_high": m.ci_high if m else "", "cv": m.cv if m else "", "noisy": m.noisy if m else "",
        "median_step_s": m.median_step_s if m else "",
        "peak_memory_bytes": m.peak_memory_bytes if m and m.peak_memory_bytes is not None else "",
        "memory_kind": m.memory_kind if m else "", "final_loss": m.final_loss if m else "",
        "input_wait_share": m.input_wait_share if m else "", "error": (r.error or "").splitlines()[0] if r.error else "",
    }


def to_csv(points: list[StoredPoint]) -> str:
    """A tidy CSV, one row per point, that pandas.read_csv reads straight."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow(csv_row(p))
    return buf.getvalue()
