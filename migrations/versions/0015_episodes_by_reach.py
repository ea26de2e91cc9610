"""Episodes are indexed by their conversation and their length, not their conversation alone:
the episodes holding a conversation's turn k are those with n_turns > k, and `warehouse search`
reports a hit turn at the shortest of them. With the conversation alone, each hit in a
trajectory of n episodes read all n of them (n² for a word the trajectory repeats; a search
for a common word in a 20,000-step trial ran past its 30 s limit); now it reads one.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_episodes_conversation_id_n_turns"), "episodes", ["conversation_id", "n_turns"])
    op.drop_index(op.f("ix_episodes_conversation_id"), "episodes")


def downgrade() -> None:
    op.create_index(op.f("ix_episodes_conversation_id"), "episodes", ["conversation_id"])
    op.drop_index(op.f("ix_episodes_conversation_id_n_turns"), "episodes")
