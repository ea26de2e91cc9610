"""Token counts as 64-bit integers: RL sweeps sum past 2^31 tokens per trial.

SQLite's INTEGER is 64-bit already, so only PostgreSQL changes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ("n_input_tokens", "n_cache_tokens", "n_output_tokens")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column in COLUMNS:
        op.alter_column("trials", column, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column in COLUMNS:
        op.alter_column("trials", column, type_=sa.Integer(), existing_type=sa.BigInteger())
