"""Initial schema: ledger, runs, tasks, trials, episodes, turns, messages, provenance,
conflicts, and the turn_text and trial_summary views.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Types copied from warehouse.db.types as they were when this revision was written.
Id = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Blob = sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")
Ts = sa.DateTime(timezone=True)


def _created_at() -> sa.Column:
    return sa.Column("created_at", Ts, server_default=sa.func.current_timestamp(), nullable=False)


TURN_TEXT = """
CREATE VIEW turn_text AS
SELECT t.episode_id, t.idx, t.role, m.content
FROM turns t LEFT JOIN messages m ON m.id = t.message_id
"""

TRIAL_SUMMARY = """
CREATE VIEW trial_summary AS
SELECT tr.id AS trial_id, r.run_key, tk.name AS task, tr.trial_name, tr.agent, tr.model,
       tr.result, tr.reward, tr.exception_type, tr.status, tr.started_at,
       (SELECT count(*) FROM episodes e WHERE e.trial_id = tr.id) AS n_episodes
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN tasks tk ON tk.id = tr.task_id
"""


def upgrade() -> None:
    op.create_table(
        "sources",
        sa.Column("id", Id, primary_key=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("revision", sa.Text()),
        sa.Column("card", Json),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
        sa.UniqueConstraint("kind", "uri", name=op.f("uq_sources_kind_uri")),
    )
    op.create_table(
        "loads",
        sa.Column("id", Id, primary_key=True),
        sa.Column("source_id", Id, nullable=False),
        sa.Column("unit", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("started_at", Ts, nullable=False),
        sa.Column("finished_at", Ts, nullable=False),
        sa.Column("tool_version", sa.Text(), nullable=False),
        *[
            sa.Column(name, sa.Integer(), nullable=False)
            for name in (
                "n_rows", "n_trials", "n_episodes_new", "n_episodes_duplicate",
                "n_conflicts", "n_rejected", "n_turns", "n_bytes",
            )
        ],
        sa.Column("arrow_schema", sa.Text()),
        sa.Column("detail", Json),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_loads")),
        sa.ForeignKeyConstraint(["source_id"], ["sources.id"], name=op.f("fk_loads_source_id_sources")),
        sa.UniqueConstraint("source_id", "content_hash", name=op.f("uq_loads_source_id_content_hash")),
    )
    op.create_table(
        "runs",
        sa.Column("id", Id, primary_key=True),
        sa.Column("run_key", sa.Text(), nullable=False),
        sa.Column("name", sa.Text()),
        sa.Column("job_id", sa.Text()),
        sa.Column("started_at", Ts),
        sa.Column("finished_at", Ts),
        sa.Column("detail", Json),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("run_key", name=op.f("uq_runs_run_key")),
    )
    op.create_table(
        "tasks",
        sa.Column("id", Id, primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("checksum", sa.Text()),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("name", name=op.f("uq_tasks_name")),
    )
    op.create_table(
        "messages",
        sa.Column("id", Id, primary_key=True),
        sa.Column("content_hash", Blob, nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_raw", Blob),
        sa.Column("n_chars", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_messages_content_hash")),
    )
    op.create_table(
        "trials",
        sa.Column("id", Id, primary_key=True),
        sa.Column("run_id", Id, nullable=False),
        sa.Column("task_id", Id),
        sa.Column("trial_name", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text()),
        sa.Column("agent_version", sa.Text()),
        sa.Column("model", sa.Text()),
        sa.Column("model_provider", sa.Text()),
        sa.Column("result", sa.Text()),
        sa.Column("reward", sa.Float()),
        sa.Column("rewards", Json),
        sa.Column("exception_type", sa.Text()),
        sa.Column("exception_message", sa.Text()),
        sa.Column("started_at", Ts),
        sa.Column("finished_at", Ts),
        sa.Column("date_raw", sa.Text()),
        sa.Column("n_input_tokens", sa.Integer()),
        sa.Column("n_cache_tokens", sa.Integer()),
        sa.Column("n_output_tokens", sa.Integer()),
        sa.Column("cost_usd", sa.Float()),
        sa.Column("verifier_output", sa.Text()),
        sa.Column("instruction_id", Id),
        sa.Column("task_checksum", sa.Text()),
        sa.Column("source_run_id", sa.Text()),
        sa.Column("detail", Json),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trials")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_trials_run_id_runs")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_trials_task_id_tasks")),
        sa.ForeignKeyConstraint(
            ["instruction_id"], ["messages.id"], name=op.f("fk_trials_instruction_id_messages")
        ),
        sa.UniqueConstraint("run_id", "trial_name", name=op.f("uq_trials_run_id_trial_name")),
    )
    op.create_index(op.f("ix_trials_task_id"), "trials", ["task_id"])
    op.create_index(op.f("ix_trials_instruction_id"), "trials", ["instruction_id"])
    op.create_table(
        "episodes",
        sa.Column("id", Id, primary_key=True),
        sa.Column("trial_id", Id, nullable=False),
        sa.Column("trace_source", sa.Text(), nullable=False),
        sa.Column("episode_index", sa.Integer(), nullable=False),
        sa.Column("n_turns", sa.Integer(), nullable=False),
        sa.Column("n_chars", sa.Integer(), nullable=False),
        sa.Column("conversation_hash", sa.Text(), nullable=False),
        sa.Column("extra", Json),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], name=op.f("fk_episodes_trial_id_trials")),
        sa.UniqueConstraint(
            "trial_id", "trace_source", "episode_index",
            name=op.f("uq_episodes_trial_id_trace_source_episode_index"),
        ),
    )
    op.create_table(
        "turns",
        sa.Column("episode_id", Id, nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("message_id", Id),
        sa.Column("extra", Json),
        sa.PrimaryKeyConstraint("episode_id", "idx", name=op.f("pk_turns")),
        sa.ForeignKeyConstraint(["episode_id"], ["episodes.id"], name=op.f("fk_turns_episode_id_episodes")),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], name=op.f("fk_turns_message_id_messages")),
    )
    op.create_index(op.f("ix_turns_message_id"), "turns", ["message_id"])
    op.create_table(
        "episode_loads",
        sa.Column("load_id", Id, nullable=False),
        sa.Column("row_number", sa.Integer(), nullable=False),
        sa.Column("episode_id", Id, nullable=False),
        sa.PrimaryKeyConstraint("load_id", "row_number", name=op.f("pk_episode_loads")),
        sa.ForeignKeyConstraint(["load_id"], ["loads.id"], name=op.f("fk_episode_loads_load_id_loads")),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_episode_loads_episode_id_episodes")
        ),
    )
    op.create_index(op.f("ix_episode_loads_episode_id"), "episode_loads", ["episode_id"])
    op.create_table(
        "trial_loads",
        sa.Column("trial_id", Id, nullable=False),
        sa.Column("load_id", Id, nullable=False),
        sa.PrimaryKeyConstraint("trial_id", "load_id", name=op.f("pk_trial_loads")),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], name=op.f("fk_trial_loads_trial_id_trials")),
        sa.ForeignKeyConstraint(["load_id"], ["loads.id"], name=op.f("fk_trial_loads_load_id_loads")),
    )
    op.create_index(op.f("ix_trial_loads_load_id"), "trial_loads", ["load_id"])
    op.create_table(
        "conflicts",
        sa.Column("id", Id, primary_key=True),
        sa.Column("load_id", Id, nullable=False),
        sa.Column("entity", sa.Text(), nullable=False),
        sa.Column("entity_id", Id, nullable=False),
        sa.Column("field", sa.Text()),
        sa.Column("kept", Json),
        sa.Column("incoming", Json),
        sa.Column("row_number", sa.Integer()),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conflicts")),
        sa.ForeignKeyConstraint(["load_id"], ["loads.id"], name=op.f("fk_conflicts_load_id_loads")),
    )
    op.create_index(op.f("ix_conflicts_load_id"), "conflicts", ["load_id"])
    op.execute(TURN_TEXT)
    op.execute(TRIAL_SUMMARY)


def downgrade() -> None:
    op.execute("DROP VIEW trial_summary")
    op.execute("DROP VIEW turn_text")
    for table in (
        "conflicts", "trial_loads", "episode_loads", "turns", "episodes", "trials",
        "messages", "tasks", "runs", "loads", "sources",
    ):
        op.drop_table(table)
