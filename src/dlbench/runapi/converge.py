"""`--converge` in the run API (issue #34): the reference runs a candidate is judged against are measured on demand
the first time, stored marked, and reused (which they are, and the verdict kept in each convergence point's extra:
analysis/references.py)."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.analysis.references import with_verdict
from dlbench.launch.registry import Launchers
from dlbench.launch.session import PointDone, PointStarted, run_points
from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.store.store import Store


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
