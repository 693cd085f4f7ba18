"""v4: a point's parallel layout is one value. Version 2 of the spec kept its ten layout options flat on the spec
(tensor_parallel, pipeline_parallel, micro_batches, pipeline_schedule, recompute, bucket_mb, fsdp,
context_parallel, expert_parallel, routing); each stored spec now holds them in its `layout` (pipeline_schedule
as `schedule`), at spec version 3. The spec's key, and so spec_key, is unchanged.

Revision ID: v4
Revises: v3
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "v4"
down_revision = "v3"
branch_labels = None
depends_on = None

# The flat fields of spec version 2, by their name in the layout (written out: a migration never changes).
FLAT = {
    "tensor_parallel": "tensor_parallel",
    "pipeline_parallel": "pipeline_parallel",
    "micro_batches": "micro_batches",
    "pipeline_schedule": "schedule",
    "recompute": "recompute",
    "bucket_mb": "bucket_mb",
    "fsdp": "fsdp",
    "context_parallel": "context_parallel",
    "expert_parallel": "expert_parallel",
    "routing": "routing",
}


def nested(text: str) -> str | None:
    """A version-2 spec as version 3 stores it, or None when it needs no change (or is not a spec: left for the
    reader to report as corrupt)."""
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    if not isinstance(spec, dict) or "layout" in spec:
        return None
    layout = {FLAT[k]: spec.pop(k) for k in list(spec) if k in FLAT}
    spec["layout"] = layout
    spec["version"] = 3
    return json.dumps(spec, sort_keys=True)


def upgrade() -> None:
    """Rewrite every stored spec into its nested form."""
    conn = op.get_bind()
    points = sa.table("points", sa.column("id", sa.Integer), sa.column("spec_json", sa.Text))
    for pid, text in conn.execute(sa.select(points.c.id, points.c.spec_json)).all():
        new = nested(str(text))
        if new is not None:
            conn.execute(points.update().where(points.c.id == pid).values(spec_json=new))
    op.execute("UPDATE schema_meta SET value='4' WHERE key='schema_version'")
