"""Summary tables for the canned queries, maintained by each unit's transaction (see
warehouse.summaries): run_task_breakdown (how trials ended, per run, task, agent, model and
exception type), run_task_outcomes (the same per run and task), trial_lengths (each trial's
trajectory length and tokens, indexed per run) and run_sources. Upgrading fills them from the
data already loaded.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Types copied from warehouse.db.types as they were when this revision was written.
Id = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
Ts = sa.DateTime(timezone=True)

# The success threshold the outcomes count at (warehouse.summaries.SUCCESS_THRESHOLD).
SUCCESS_THRESHOLD = 1.0

BACKFILL = (
    """
    INSERT INTO trial_lengths (trial_id, run_id, turns, chars, input_tokens, output_tokens)
    SELECT tr.id, tr.run_id, e.n_turns, e.n_chars, tr.n_input_tokens, tr.n_output_tokens
    FROM trials tr
    LEFT JOIN episodes e ON e.id = (
        SELECT longest.id FROM episodes longest
        WHERE longest.trial_id = tr.id AND longest.trace_source = 'main'
        ORDER BY longest.n_turns DESC, longest.episode_index DESC
        LIMIT 1)
    """,
    f"""
    INSERT INTO run_task_breakdown (
        run_id, task_id, agent, model, exception_type, n_trials, n_complete, n_incomplete,
        n_successes, n_rewards, reward_sum, first_started, last_started, n_with_trajectory,
        n_with_input_tokens, n_with_output_tokens)
    SELECT t.run_id, t.task_id, t.agent, t.model, t.exception_type,
           count(*),
           sum(CASE WHEN t.status = 'complete' THEN 1 ELSE 0 END),
           sum(CASE WHEN t.status = 'incomplete' THEN 1 ELSE 0 END),
           sum(CASE WHEN t.reward >= {SUCCESS_THRESHOLD} THEN 1 ELSE 0 END),
           count(t.reward), sum(t.reward), min(t.started_at), max(t.started_at),
           count(l.turns), count(l.input_tokens), count(l.output_tokens)
    FROM trials t
    JOIN trial_lengths l ON l.trial_id = t.id
    GROUP BY t.run_id, t.task_id, t.agent, t.model, t.exception_type
    """,
    """
    INSERT INTO run_task_outcomes (
        run_id, task_id, n_trials, n_complete, n_incomplete, n_successes, n_rewards, reward_sum,
        n_errors, first_started, last_started, n_with_trajectory, n_with_input_tokens,
        n_with_output_tokens)
    SELECT b.run_id, b.task_id, sum(b.n_trials), sum(b.n_complete), sum(b.n_incomplete),
           sum(b.n_successes), sum(b.n_rewards), sum(b.reward_sum),
           sum(CASE WHEN b.exception_type IS NOT NULL THEN b.n_trials ELSE 0 END),
           min(b.first_started), max(b.last_started), sum(b.n_with_trajectory),
           sum(b.n_with_input_tokens), sum(b.n_with_output_tokens)
    FROM run_task_breakdown b
    GROUP BY b.run_id, b.task_id
    """,
    """
    INSERT INTO run_sources (run_id, source_id)
    SELECT DISTINCT tr.run_id, l.source_id
    FROM trial_loads tl
    JOIN trials tr ON tr.id = tl.trial_id
    JOIN loads l ON l.id = tl.load_id
    """,
)


def upgrade() -> None:
    counts = ("n_trials", "n_complete", "n_incomplete", "n_successes", "n_rewards")
    lengths = ("n_with_trajectory", "n_with_input_tokens", "n_with_output_tokens")
    op.create_table(
        "run_task_breakdown",
        sa.Column("id", Id, primary_key=True),
        sa.Column("run_id", Id, nullable=False),
        sa.Column("task_id", Id),
        sa.Column("agent", sa.Text()),
        sa.Column("model", sa.Text()),
        sa.Column("exception_type", sa.Text()),
        *[sa.Column(name, sa.Integer(), nullable=False) for name in counts],
        sa.Column("reward_sum", sa.Float()),
        sa.Column("first_started", Ts),
        sa.Column("last_started", Ts),
        *[sa.Column(name, sa.Integer(), nullable=False) for name in lengths],
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_task_breakdown")),
    )
    op.create_table(
        "run_task_outcomes",
        sa.Column("id", Id, primary_key=True),
        sa.Column("run_id", Id, nullable=False),
        sa.Column("task_id", Id),
        *[sa.Column(name, sa.Integer(), nullable=False) for name in counts],
        sa.Column("reward_sum", sa.Float()),
        sa.Column("n_errors", sa.Integer(), nullable=False),
        sa.Column("first_started", Ts),
        sa.Column("last_started", Ts),
        *[sa.Column(name, sa.Integer(), nullable=False) for name in lengths],
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_task_outcomes")),
        sa.UniqueConstraint("run_id", "task_id", name=op.f("uq_run_task_outcomes_run_id_task_id")),
    )
    op.create_table(
        "trial_lengths",
        sa.Column("trial_id", Id, nullable=False, autoincrement=False),
        sa.Column("run_id", Id, nullable=False),
        sa.Column("turns", sa.Integer()),
        sa.Column("chars", sa.Integer()),
        sa.Column("input_tokens", Id),
        sa.Column("output_tokens", Id),
        sa.PrimaryKeyConstraint("trial_id", name=op.f("pk_trial_lengths")),
    )
    op.create_table(
        "run_sources",
        sa.Column("run_id", Id, nullable=False, autoincrement=False),
        sa.Column("source_id", Id, nullable=False, autoincrement=False),
        sa.PrimaryKeyConstraint("run_id", "source_id", name=op.f("pk_run_sources")),
    )
    for statement in BACKFILL:
        op.execute(statement)
    # Indexes after the backfill: one sort each instead of an insert at a time.
    op.create_index(op.f("ix_run_task_breakdown_run_id_task_id"), "run_task_breakdown", ["run_id", "task_id"])
    op.create_index("ix_run_task_breakdown_groups", "run_task_breakdown",
                    ["run_id", "agent", "model", "exception_type", "n_trials", "n_successes", "n_rewards",
                     "reward_sum"])
    op.create_index("ix_run_task_breakdown_failures", "run_task_breakdown",
                    ["exception_type", "run_id", "task_id", "n_trials"])
    op.create_index("ix_run_task_outcomes_by_task", "run_task_outcomes",
                    ["task_id", "run_id", "n_trials", "n_successes"])
    for measure in ("turns", "chars", "input_tokens", "output_tokens"):
        where = sa.text(f"{measure} IS NOT NULL")
        op.create_index(op.f(f"ix_trial_lengths_run_id_{measure}"), "trial_lengths", ["run_id", measure],
                        sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for table in ("run_sources", "trial_lengths", "run_task_outcomes", "run_task_breakdown"):
        op.drop_table(table)
