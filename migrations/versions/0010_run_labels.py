"""`run_labels`: key=value labels on runs (`step=13`, `lr=3e-5`), one value per key per run.

A sweep's checkpoints are runs; what tells them apart (the step, the learning rate) is a label,
by which queries filter (`--label step=13`) and group (`--by label:step`). Values are text, as
given; ordering by a label compares numbers as numbers where every value is one (warehouse.runs).

It also names the runs loaded before it without a name (Hub rows carrying a job UUID): for the
dataset they came from, as an ingest now does (warehouse.runs.source_run_name, copied here, as
revisions never import the live code): the dataset's name, or with several runs in it the name
and the first 8 characters of the key. Downgrading keeps the names (the column is older).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from warehouse.db.types import Id, UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_labels",
        sa.Column("run_id", Id, sa.ForeignKey("runs.id", name="fk_run_labels_run_id_runs"), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", UtcDateTime, server_default=sa.func.current_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key", name="pk_run_labels"),
    )
    op.create_index("ix_run_labels_key_value", "run_labels", ["key", "value"])
    # Ad-hoc SQL runs as warehouse_reader on PostgreSQL (migration 0007): it may read labels too.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'warehouse_reader') "
                   "THEN GRANT SELECT ON run_labels TO warehouse_reader; END IF; END $$")
    _name_runs(op.get_bind())


def _name_runs(bind) -> None:
    # Each unnamed run's first source (the lowest id among those its trials came from), and how
    # many runs that source's rows belong to.
    unnamed = bind.execute(sa.text("""
        SELECT r.id, r.run_key, s.name,
               (SELECT count(*) FROM run_sources n WHERE n.source_id = s.id) AS n_runs
        FROM runs r
        JOIN sources s ON s.id = (SELECT min(rs.source_id) FROM run_sources rs WHERE rs.run_id = r.id)
        WHERE r.name IS NULL""")).all()
    for run_id, run_key, name, n_runs in unnamed:
        named = name if n_runs == 1 or run_key == name else f"{name}-{run_key[:8]}"
        bind.execute(sa.text("UPDATE runs SET name = :n WHERE id = :id"), {"n": named, "id": run_id})


def downgrade() -> None:
    op.drop_index("ix_run_labels_key_value", table_name="run_labels")
    op.drop_table("run_labels")
