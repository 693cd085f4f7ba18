"""Copy runs between stores (push to a team's server, pull from it), idempotently.

Runs are keyed on their id and points on their UUID, both globally unique, so copying twice adds nothing and
copies from several machines meet without clashing. Each run is copied in one transaction of the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from dlbench.store.store import FINAL_STATUSES, Store, StoreError
from dlbench.store.store_sql import points, runs


@dataclass(frozen=True)
class Copied:
    """What a copy did: runs new to the target, runs whose status it updated, points added and already there."""

    runs_added: int = 0
    runs_updated: int = 0
    points_added: int = 0
    points_present: int = 0

    def __add__(self, other: Copied) -> Copied:
        return Copied(
            self.runs_added + other.runs_added,
            self.runs_updated + other.runs_updated,
            self.points_added + other.points_added,
            self.points_present + other.points_present,
        )


def _copy_run(src: Store, dst: Store, run_id: str) -> Copied:
    with src.transaction() as c:
        run = dict(c.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().one())
        rows = [
            dict(r)
            for r in c.execute(sa.select(points).where(points.c.run_id == run_id).order_by(points.c.id)).mappings()
        ]
    run["status"] = src.get_run(run_id).status  # a run whose controller died goes out as interrupted
    for r in rows:
        r.pop("id")
        if not r.get("uid"):
            raise StoreError(
                f"point {r.get('id')} of run {run_id} in {src.path} has no unique id: open the store "
                "with a write command first to migrate it"
            )
    added = updated = 0
    with dst.transaction(write=True) as c:
        there = c.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().first()
        if there is None:
            c.execute(runs.insert().values(**run))
            added = 1
        elif (there["created"], there["command"]) != (run["created"], run["command"]):
            raise StoreError(f"run {run_id} in {dst.path} is a different run with the same id: not copied")
        elif there["status"] != run["status"] and (run["status"] in FINAL_STATUSES or there["status"] == "running"):
            c.execute(
                runs.update()
                .where(runs.c.id == run_id)
                .values(
                    status=run["status"],
                    reason=run["reason"],
                    meta_json=run["meta_json"],
                    host=run["host"],
                    pid=run["pid"],
                    pid_started=run["pid_started"],
                )
            )
            updated = 1
        have = {str(u) for (u,) in c.execute(sa.select(points.c.uid).where(points.c.run_id == run_id))}
        new = [r for r in rows if r["uid"] not in have]
        if new:
            c.execute(points.insert(), new)
    return Copied(added, updated, len(new), len(rows) - len(new))


def copy_runs(src: Store, dst: Store, run_ids: Sequence[str]) -> Copied:
    """Copy these runs (ids or unique prefixes; every run when empty) with all their points from src to dst."""
    ids = [src.get_run(r).id for r in run_ids] if run_ids else [r.id for r in reversed(src.runs())]
    total = Copied()
    for run_id in ids:
        total = total + _copy_run(src, dst, run_id)
    return total
