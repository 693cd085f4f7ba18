"""`--converge` in the run API (issue #34): the reference runs a candidate is judged against are measured on demand
the first time, stored marked, and reused (which they are, and the verdict kept in each convergence point's extra:
analysis/references.py)."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.analysis.references import needs_local, with_verdict
from dlbench.analysis.targets import REFERENCE_RUNS, REFERENCE_SEED0, target_for
from dlbench.cases import get_case
from dlbench.launch.registry import Launchers
from dlbench.launch.session import PointDone, PointStarted, run_points
from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.store.store import Store


def plan_lines(references: Sequence[PointSpec], specs: Sequence[PointSpec]) -> list[str]:
    """What a --converge run will train, said before it starts: the reference runs first (how many, of what, and
    why), then each convergence point's target and step budget, before its throughput is measured."""
    judged = [s for s in specs if s.converge]
    if not judged:
        return []
    lines = []
    if references:
        refs = sorted({f"{r.framework} {r.model} bs{r.batch_size}" for r in references})
        last = REFERENCE_SEED0 + REFERENCE_RUNS - 1
        lines.append(
            f"--converge: first {len(references)} local reference run(s), fp32 on one device, seeds "
            f"{REFERENCE_SEED0}-{last} ({'; '.join(refs)}): no shipped reference point matches (or --converge-"
            "reference local asked for them), so these are what the verdicts are judged against; stored, and reused"
            " by later runs"
        )
    elif any(needs_local(s) for s in judged):
        lines.append("--converge: the local reference runs the verdicts are judged against are in the store already")
    else:
        lines.append(
            "--converge: every verdict is judged against a shipped reference point (dlbench reference convergence)"
        )
    for s in judged:
        target = target_for(get_case(s.model).configured(s.params), s.converge_steps, s.converge_target)
        if target is not None:
            lines.append(
                f"--converge: {s.framework} {s.model} bs{s.batch_size} {s.precision} trains to loss {target.loss:g} "
                f"(read every {target.every} steps, at most {target.budget:,}), then its throughput is measured"
            )
    return lines


def measure_references(
    store: Store,
    run_id: str,
    references: Sequence[PointSpec],
    launchers: Launchers,
    started: PointStarted | None = None,
    done: PointDone | None = None,
) -> list[PointResult]:
    """Run the reference points a run or a sweep lacks (missing_references), each stored marked as a reference."""
    if not references:
        return []
    return run_points(
        store,
        run_id,
        references,
        launchers,
        started=started,
        done=done,
        finish=lambda r: with_verdict(r, (), reference_run=True),
    )
