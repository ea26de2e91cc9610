"""A covering index for the cross-run queries: they group trials by run and task and read
only outcome columns, which this index holds, so they never read the wide trial rows
(verifier output, details).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = ["run_id", "task_id", "reward", "exception_type", "status", "agent", "model", "started_at"]


def upgrade() -> None:
    op.create_index("ix_trials_outcomes", "trials", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_trials_outcomes", table_name="trials")
