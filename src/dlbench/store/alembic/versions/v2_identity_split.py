"""v2: the environment split into identity and descriptive keys; runs get a kind and metadata.

Revision ID: v2
Revises: v1
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from dlbench.machine.env import IDENTITY_KEYS

revision = "v2"
down_revision = "v1"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the columns and split every stored environment."""
    op.add_column("runs", sa.Column("kind", sa.Text, nullable=False, server_default="run"))
    op.add_column("runs", sa.Column("meta_json", sa.Text, nullable=False, server_default="{}"))
    for name in ("identity_json", "descriptive_json", "extra_json"):
        op.add_column("points", sa.Column(name, sa.Text, nullable=False, server_default="{}"))
    conn = op.get_bind()
    points = sa.table(
        "points",
        sa.column("id", sa.Integer),
        sa.column("env_json", sa.Text),
        sa.column("identity_json", sa.Text),
        sa.column("descriptive_json", sa.Text),
    )
    for pid, env_json in conn.execute(sa.select(points.c.id, points.c.env_json)).all():
        env = json.loads(env_json or "{}")
        ident = {k: str(v) for k, v in env.items() if k in IDENTITY_KEYS}
        desc = {k: str(v) for k, v in env.items() if k not in IDENTITY_KEYS}
        conn.execute(
            points.update()
            .where(points.c.id == pid)
            .values(identity_json=json.dumps(ident), descriptive_json=json.dumps(desc))
        )
    op.execute("UPDATE schema_meta SET value='2' WHERE key='schema_version'")
