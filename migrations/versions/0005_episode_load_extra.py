"""Each input row's own extra columns: `episode_loads.extra`.

A row that repeats an episode already stored (same key, same conversation) may still carry
other values in its extra columns (a second dataset's own metadata, an `episode` string spelled
differently). They are kept here, on the row's provenance, when they differ from the episode's;
NULL means the row had exactly the episode's.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("episode_loads", sa.Column("extra", Json))


def downgrade() -> None:
    with op.batch_alter_table("episode_loads") as batch:
        batch.drop_column("extra")
