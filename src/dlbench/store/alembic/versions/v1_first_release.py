"""v1: the first release's schema (the environment as one JSON blob, runs without kind).

Revision ID: v1
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the version-1 tables; new stores start here and migrate forward."""
    op.create_table(
        "runs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
    )
    op.create_table(
        "points",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("spec_key", sa.Text, nullable=False),
        sa.Column("framework", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("batch_size", sa.BigInteger, nullable=False),
        sa.Column("precision", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("ranks_json", sa.Text, nullable=False),
        sa.Column("metrics_json", sa.Text),
        sa.Column("env_json", sa.Text, nullable=False),
        sa.Column("started", sa.Float, nullable=False),
        sa.Column("finished", sa.Float, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("points_run", "points", ["run_id"])
    meta = op.create_table(
        "schema_meta", sa.Column("key", sa.Text, primary_key=True), sa.Column("value", sa.Text, nullable=False)
    )
    op.bulk_insert(meta, [{"key": "schema_version", "value": "1"}])
