"""The ledger is keyed by each unit's name as well as its content: `loads` unique on
(source_id, unit, content_hash), was (source_id, content_hash).

Two byte-identical shards of one dataset (or two identical trial directories) are two inputs:
each gets its own ledger row and provenance (episode_loads), so `export hub --source` gives both
back. Re-ingesting a source still skips every unit it loaded.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from warehouse.errors import WarehouseError

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("loads") as batch:
        batch.drop_constraint("uq_loads_source_id_content_hash", type_="unique")
        batch.create_unique_constraint("uq_loads_source_id_unit_content_hash", ["source_id", "unit", "content_hash"])


def downgrade() -> None:
    # 0005 holds one ledger row per content hash and source: a warehouse that loaded identical
    # units under two names cannot go back without losing the provenance of one of them.
    twins = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM loads a JOIN loads b ON a.source_id = b.source_id "
        "AND a.content_hash = b.content_hash AND a.id > b.id")).scalar()
    if twins:
        raise WarehouseError(f"cannot downgrade below 0006: {twins} ledger rows (loads) are byte-identical copies of "
                           "another unit of their source, which revision 0005 cannot hold")
    with op.batch_alter_table("loads") as batch:
        batch.drop_constraint("uq_loads_source_id_unit_content_hash", type_="unique")
        batch.create_unique_constraint("uq_loads_source_id_content_hash", ["source_id", "content_hash"])
