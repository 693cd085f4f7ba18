"""One outcome from what a point's ranks left: their WorkerResults (checked on read), merged, and how the
engine that ran them ended. Imports no framework."""

from __future__ import annotations

import math
from pathlib import Path

from dlbench.launch.outcome import ChildOutcome
from dlbench.spec import NO_EXCHANGE_STRATEGIES, PointSpec
from dlbench.wire import ResultError, WorkerResult, rank_result_path, read_result

CHECKSUM_REL_TOL = 1e-9  # identical parameters give identical sums; 1e-9 only absorbs different CPUs' rounding


def _first_line(text: str | None, default: str) -> str:
    lines = (text or "").splitlines()
    return lines[0] if lines else default


def merge(spec: PointSpec, results: dict[int, WorkerResult], unreadable: dict[int, str]) -> ChildOutcome:
    """One outcome from every rank's result: a missing or failed rank fails the point; checksums must agree."""
    if spec.processes == 1 and 0 in results:  # a single worker: its own words
        only = results[0]
        if only.status == "ok" and spec.world_size > 1:  # one process, several devices: its replicas' checksums
            return replica_check(spec, only)
        return ChildOutcome(only.status, result=only, error=only.error, tail=list(only.traceback))
    missing = [r for r in range(spec.processes) if r not in results]
    failed = [r for r in sorted(results) if results[r].status != "ok"]
    if missing or failed:
        reasons = [f"rank {r}: {unreadable[r]}" for r in missing if r in unreadable]
        silent = [r for r in missing if r not in unreadable]
        if silent:
            reasons.append(f"rank(s) {', '.join(map(str, silent))} of {spec.processes} wrote no result")
        said = {_first_line(results[r].error, results[r].status) for r in failed}
        if len(failed) == spec.processes and len(said) == 1:  # every rank said the same: say it once
            reasons.append(f"{said.pop()} (all {spec.processes} ranks)")
        else:
            reasons += [f"rank {r}: {_first_line(results[r].error, results[r].status)}" for r in failed]
        first = results[failed[0]] if failed else None
        status = "error" if missing or first is None else first.status
        kept = WorkerResult(status=status, env=first.env) if first else None
        return ChildOutcome(status, result=kept, error="; ".join(reasons), tail=first.traceback if first else [])
    ranks = [rank for r in range(spec.processes) for rank in results[r].ranks]
    env = dict(results[0].env)
    hosts = [results[r].env.get("node_hostname", "") for r in range(spec.processes)]
    if spec.processes > 1 and any(hosts):
        env["rank_hosts"] = ",".join(hosts)
    merged = WorkerResult(status="ok", ranks=ranks, env=env, facts=dict(results[0].facts))
    sums = [r.param_checksum for r in ranks]
    values = [s for s in sums if s is not None]
    if spec.processes > 1 and len(values) < len(sums):
        nones = ", ".join(str(i) for i, s in enumerate(sums) if s is None)
        return ChildOutcome(
            "failed_check",
            result=merged,
            error=f"rank(s) {nones} reported no parameter checksum: "
            f"the {spec.framework} backend does not keep ranks in sync",
        )
    if values and not all(math.isclose(v, values[0], rel_tol=CHECKSUM_REL_TOL) for v in values):
        return ChildOutcome(
            "failed_check",
            result=merged,
            error="parameters differ across ranks after the timed steps: checksums "
            + ", ".join(f"rank {i} {v:.12g}" for i, v in enumerate(values)),
        )
    return ChildOutcome("ok", result=merged)


def replica_check(spec: PointSpec, result: WorkerResult) -> ChildOutcome:
    """The gradient exchange of one process driving several devices, checked as ranks' are: every copy of the
    parameters equal after the measured steps, or the point fails. A strategy that exchanges nothing
    (`independent`) is expected to differ: recorded, never failed. One copy (a parameter server) is said so."""
    raw = result.facts.get("replica_checksums")
    sums = [float(v) for v in raw] if isinstance(raw, list) and all(isinstance(v, (int, float)) for v in raw) else []
    if not sums:
        return ChildOutcome(
            "failed_check",
            result=result,
            error=f"the {spec.framework} backend reported no replica "
            f"checksums for {spec.strategy} on {spec.world_size} devices: it cannot show its "
            "replicas in sync",
        )
    equal = all(math.isclose(v, sums[0], rel_tol=CHECKSUM_REL_TOL) for v in sums)
    if spec.strategy in NO_EXCHANGE_STRATEGIES:
        verdict = (
            f"{len(sums)} copies differ, as expected: {spec.strategy} exchanges no gradients"
            if not equal
            else f"{len(sums)} copies equal although {spec.strategy} exchanges nothing (identical batches?)"
        )
    elif len(sums) == 1:
        verdict = f"one copy of the parameters, read by all {spec.world_size} devices (nothing to compare)"
    elif equal:
        verdict = f"{len(sums)} copies equal after the measured steps"
    else:
        return ChildOutcome(
            "failed_check",
            result=result,
            error="parameters differ across replicas after the timed steps: checksums "
            + ", ".join(f"replica {i} {v:.12g}" for i, v in enumerate(sums)),
        )
    facts = {**result.facts, "replica_check": verdict}
    return ChildOutcome("ok", result=result.model_copy(update={"facts": facts}))


def collect(
    spec: PointSpec, result: Path, failure: ChildOutcome | None, env: dict[str, str] | None = None
) -> ChildOutcome:
    """Merge the rank files next to `result` (the file itself for one rank) with how the engine ended.

    A timeout or an out-of-memory kill wins. Otherwise the ranks' own records come first (a rank that wrote
    nothing, a rank's error such as a peer closing the connection), followed by the engine's reason. Ranks
    that all measured are kept even if the engine complained afterwards (noted in the facts).
    """
    paths = {0: result} if spec.processes == 1 else {r: rank_result_path(result, r) for r in range(spec.processes)}
    found: dict[int, WorkerResult] = {}
    unreadable: dict[int, str] = {}
    for rank, path in paths.items():
        if not path.exists():
            continue
        try:
            found[rank] = read_result(path)
        except ResultError as exc:
            unreadable[rank] = str(exc)
    if failure is not None and failure.status in ("timeout", "oom"):
        out = failure
    else:
        out = merge(spec, found, unreadable)
        if failure is not None and out.status == "ok" and out.result is not None:
            out.result = out.result.model_copy(
                update={"facts": {**out.result.facts, "launcher_warning": failure.error}}
            )
        elif failure is not None and not found:  # the engine's reason is the whole story
            reason = "; ".join(unreadable.values()) or "no result was written"
            out = ChildOutcome(failure.status, error=f"{failure.error}; {reason}", tail=failure.tail)
        elif failure is not None:  # a rank that wrote nothing ended as the engine says (crashed, error)
            status = failure.status if len(found) < spec.processes else out.status
            out = ChildOutcome(
                status, result=out.result, error=f"{out.error}; {failure.error}", tail=out.tail or failure.tail
            )
    if failure is not None:
        out.tail = out.tail or failure.tail
        out.wall_s = failure.wall_s
    if env:
        base = out.result or WorkerResult(status="error")
        out.result = base.model_copy(update={"env": {**base.env, **env}})
    return out
