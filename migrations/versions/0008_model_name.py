"""`model_name`: the model without its provider prefix, on trials and run_task_breakdown.

Harbor's `model` is whatever the agent was given: `anthropic/kimi-k2.6`, `kimi-k2.6`,
`openrouter/anthropic/claude-sonnet-4`, `hosted_vllm/Qwen/Qwen3-8B`. `model_name` is its last
`/`-separated segment (`kimi-k2.6`, `claude-sonnet-4`, `Qwen3-8B`), so one model served through
several providers groups as one (`pass-rate --by model`); `model` stays as it came, and is what
exports write. A generated column: the database derives it from `model`, so it can never
disagree with it, fills itself for the rows already loaded, and needs nothing from a writer.
(Stored on PostgreSQL, computed on read on SQLite, which cannot add a stored one.)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# warehouse.db.models.MODEL_NAME_SQL as it was when this revision was written. rtrim(m, chars)
# strips the trailing characters that are not '/', i.e. everything after the last '/'.
MODEL_NAME_SQL = "substr(model, length(rtrim(model, replace(model, '/', ''))) + 1)"
TABLES = ("trials", "run_task_breakdown")


def upgrade() -> None:
    persisted = True if op.get_bind().dialect.name == "postgresql" else None  # SQLite: virtual
    for table in TABLES:
        op.add_column(table, sa.Column("model_name", sa.Text(), sa.Computed(MODEL_NAME_SQL, persisted=persisted)))


def downgrade() -> None:
    # Plain ALTER TABLE on both backends (SQLite >= 3.35): a batch copy of the table would
    # try to copy the generated column's values back in.
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN model_name")
