"""Alembic's environment for the dlbench store: migrations run on the connection (and in the transaction)
that dlbench.store.migrations hands over, for SQLite and PostgreSQL alike."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
with context.begin_transaction():  # inside the caller's transaction: nothing is committed half-way
    context.run_migrations()
