"""PostgreSQL: the references of the tables an ingest fills a row per trial or more (trials,
episodes, conversations, conversation_turns, episode_loads, trial_loads) are kept by the writer,
as on SQLite, not checked by the server row by row.

The writer only writes ids it allocated or looked up under the write lock (ingest.write.bulk).
On SQLite it already turns the per-row checks off (session.write_transaction). PostgreSQL cannot
be told to trust a writer short of a superuser's session_replication_role, and its checks were
a third of an ingest: 313,000 lookups for the math export, 2.0 s of 6.4 (measured, BENCHMARKS.md).
So these foreign keys go on PostgreSQL; SQLite keeps them declared, for the tools that read them.
`warehouse db check` finds any reference to a row that does not exist, on both backends
(warehouse.db.integrity), and the tests run it on what every load and delete leaves.

The small tables' references (a load's source, a conflict's load, a label's run) stay checked.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# (table, constraint, column, referenced table): each references the other table's id.
REFERENCES = (
    ("trials", "fk_trials_run_id_runs", "run_id", "runs"),
    ("trials", "fk_trials_task_id_tasks", "task_id", "tasks"),
    ("trials", "fk_trials_instruction_id_messages", "instruction_id", "messages"),
    ("episodes", "fk_episodes_trial_id_trials", "trial_id", "trials"),
    ("episodes", "fk_episodes_conversation_id_conversations", "conversation_id", "conversations"),
    ("conversations", "fk_conversations_trial_id_trials", "trial_id", "trials"),
    ("conversation_turns", "fk_conversation_turns_conversation_id_conversations", "conversation_id", "conversations"),
    ("conversation_turns", "fk_conversation_turns_message_id_messages", "message_id", "messages"),
    ("episode_loads", "fk_episode_loads_episode_id_episodes", "episode_id", "episodes"),
    ("episode_loads", "fk_episode_loads_load_id_loads", "load_id", "loads"),
    ("trial_loads", "fk_trial_loads_trial_id_trials", "trial_id", "trials"),
    ("trial_loads", "fk_trial_loads_load_id_loads", "load_id", "loads"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, name, _, _ in REFERENCES:
        op.drop_constraint(name, table, type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Checked again as they are added: a warehouse holding a broken reference stays at 0016.
    for table, name, column, referenced in REFERENCES:
        op.create_foreign_key(name, table, referenced, [column], ["id"])
