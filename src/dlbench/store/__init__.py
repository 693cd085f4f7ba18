"""The store *keeps* what was measured: a SQLite file (the default) or a PostgreSQL server behind one SQLAlchemy
Core layer, its schema migrations (Alembic revisions under alembic/), the rows it reads and checks on the way in
and out, recovery from an interrupted run, the claims that stop two controllers writing one run, and copying runs
between stores. It records and reads plain records (`dlbench.records`); it never observes the machine and never
analyses a figure."""
