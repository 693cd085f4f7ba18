"""v3: a team store. Points get a globally unique id (copies between stores are keyed on it); runs record
their controller (host, pid, the pid's start time) so that a run whose controller died reads `interrupted`,
and a one-line reason when they fail.

Revision ID: v3
Revises: v2
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "v3"
down_revision = "v2"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the columns, give every existing point a UUID, index what history reads."""
    op.add_column("points", sa.Column("uid", sa.Text))
    op.add_column("runs", sa.Column("host", sa.Text))
    op.add_column("runs", sa.Column("pid", sa.BigInteger))
    op.add_column("runs", sa.Column("pid_started", sa.Float))
    op.add_column("runs", sa.Column("reason", sa.Text))
    conn = op.get_bind()
    points = sa.table("points", sa.column("id", sa.Integer), sa.column("uid", sa.Text))
    for (pid,) in conn.execute(sa.select(points.c.id).where(points.c.uid.is_(None))).all():
        conn.execute(points.update().where(points.c.id == pid).values(uid=str(uuid.uuid4())))
    op.create_index("points_uid", "points", ["uid"], unique=True)
    op.create_index("points_model", "points", ["model", "framework"])
    op.execute("UPDATE schema_meta SET value='3' WHERE key='schema_version'")
