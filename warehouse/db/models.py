"""The warehouse schema. Table and column names are the public interface people write SQL
against: add columns freely, rename nothing. Alembic revisions copy these definitions rather
than import them, so a revision keeps meaning what it meant when it was written.

Plain SQLAlchemy Core tables: nothing maps rows to objects (the writer moves columns, the
queries are SQL), and the ORM's import and class building cost every command about 70 ms of
start-up."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)

from warehouse.db.types import Blob, Id, Json, UtcDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
# Views, made by the migrations: described for the code that reads them, kept out of `metadata`.
views = MetaData()


# A model without its provider prefix: the last '/'-separated segment of `model`
# ("openrouter/anthropic/claude-sonnet-4" -> "claude-sonnet-4"), computed by the database (see
# migration 0008). rtrim(m, chars) strips the trailing characters that are not '/'.
MODEL_NAME_SQL = "substr(model, length(rtrim(model, replace(model, '/', ''))) + 1)"


# --- the ingest ledger -------------------------------------------------------------------


# A Hub dataset, a local Parquet folder or file, or a trace directory root.
sources = Table(
    "sources", metadata,
    Column("id", Id, primary_key=True),
    Column("kind", Text, nullable=False),  # "hub" | "parquet" | "traces"
    Column("uri", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("revision", Text, nullable=True),
    Column("card", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
    UniqueConstraint("kind", "uri"),
)


# One ingested unit (a Parquet shard or a trial directory), written in the same
# transaction as its rows: if the ledger says a unit loaded, all of it did. A unit is its name
# and its content: two byte-identical shards of a dataset are two units.
loads = Table(
    "loads", metadata,
    Column("id", Id, primary_key=True),
    Column("source_id", ForeignKey("sources.id"), nullable=False),
    Column("unit", Text, nullable=False),  # path of the shard or trial directory, relative to the source
    Column("content_hash", Text, nullable=False),
    Column("status", Text, nullable=False),  # "loaded"
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=False),
    Column("tool_version", Text, nullable=False),
    Column("n_rows", Integer, default=0, nullable=False),
    Column("n_trials", Integer, default=0, nullable=False),
    Column("n_episodes_new", Integer, default=0, nullable=False),
    Column("n_episodes_duplicate", Integer, default=0, nullable=False),
    Column("n_conflicts", Integer, default=0, nullable=False),
    Column("n_rejected", Integer, default=0, nullable=False),
    Column("n_turns", Integer, default=0, nullable=False),
    Column("n_bytes", Integer, default=0, nullable=False),
    # The shard's Arrow schema, so an export can write the columns back with their types.
    Column("arrow_schema", Text, nullable=True),
    Column("detail", Json, nullable=True),
    UniqueConstraint("source_id", "unit", "content_hash"),
)


# --- what was run ------------------------------------------------------------------------


# A Harbor job, an RL run or a sweep. `run_key` is the job UUID, or for RL rollouts
# (whose run_id is only the trial name) the name the source was ingested under.
runs = Table(
    "runs", metadata,
    Column("id", Id, primary_key=True),
    Column("run_key", Text, unique=True, nullable=False),
    Column("name", Text, nullable=True),
    Column("job_id", Text, nullable=True),
    Column("started_at", UtcDateTime, nullable=True),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("detail", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
)


# A `key=value` label on a run (`step=13`): given at ingest (`--label`), later
# (`warehouse runs label`), or taken from what a source says (a dataset card, a job config).
run_labels = Table(
    "run_labels", metadata,
    Column("run_id", ForeignKey("runs.id"), primary_key=True),
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
    Index("ix_run_labels_key_value", "key", "value"),
)


tasks = Table(
    "tasks", metadata,
    Column("id", Id, primary_key=True),
    Column("name", Text, unique=True, nullable=False),
    Column("checksum", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
)


# One attempt of a task in a run. `result` is the exported string kept raw; `reward`
# and `exception_type` are its parse (or, from trace directories, the full truth).
trials = Table(
    "trials", metadata,
    Column("id", Id, primary_key=True),
    Column("run_id", ForeignKey("runs.id"), nullable=False),
    Column("task_id", ForeignKey("tasks.id"), nullable=True),
    Column("trial_name", Text, nullable=False),
    Column("status", Text, nullable=False),  # "complete" | "incomplete"
    Column("agent", Text, nullable=True),
    Column("agent_version", Text, nullable=True),
    Column("model", Text, nullable=True),  # as the source wrote it (and as exports write it)
    Column("model_provider", Text, nullable=True),
    Column("result", Text, nullable=True),
    Column("reward", Float, nullable=True),
    Column("rewards", Json, nullable=True),
    Column("exception_type", Text, nullable=True),
    Column("exception_message", Text, nullable=True),
    Column("started_at", UtcDateTime, nullable=True),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("date_raw", Text, nullable=True),
    Column("n_input_tokens", Id, nullable=True),
    Column("n_cache_tokens", Id, nullable=True),
    Column("n_output_tokens", Id, nullable=True),
    Column("cost_usd", Float, nullable=True),
    Column("verifier_output", Text, nullable=True),
    Column("instruction_id", ForeignKey("messages.id"), nullable=True),
    Column("task_checksum", Text, nullable=True),
    Column("source_run_id", Text, nullable=True),
    # Phase timings, step results, configs, and the exact bytes of any text column whose
    # value could not be stored as is (see warehouse.texts).
    Column("detail", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
    Column("model_name", Text, Computed(MODEL_NAME_SQL)),  # `model` without its provider prefix
    UniqueConstraint("run_id", "trial_name"),
    Index(None, "task_id"),
    # Covers the cross-run queries (grouped by run and task, outcome columns only), so
    # they never read the wide rows. See migration 0003.
    Index("ix_trials_outcomes", "run_id", "task_id", "reward", "exception_type", "status", "agent",
          "model", "started_at"),
    Index(None, "instruction_id"),
)


# One exported episode of a trial: the first `n_turns` turns of its conversation (NULL for
# an episode of no turns). `conversation_hash` decides whether a second copy from another
# source is a duplicate (same hash) or a conflict (different hash).
episodes = Table(
    "episodes", metadata,
    Column("id", Id, primary_key=True),
    Column("trial_id", ForeignKey("trials.id"), nullable=False),
    Column("trace_source", Text, nullable=False),
    Column("episode_index", Integer, nullable=False),
    Column("n_turns", Integer, nullable=False),
    Column("n_chars", Integer, nullable=False),
    Column("conversation_hash", Text, nullable=False),
    Column("extra", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
    Column("conversation_id", ForeignKey("conversations.id"), nullable=True),
    UniqueConstraint("trial_id", "trace_source", "episode_index"),
    Index(None, "conversation_id", "n_turns"),
)


# A trial's conversation, stored once: each of the trial's episodes is a prefix of one. A
# trial's conversations are the longest of its episodes' turn lists (role, message and turn
# extra): none is a prefix of another, whatever order the episodes came in (see
# ingest.write.conversations).
conversations = Table(
    "conversations", metadata,
    Column("id", Id, primary_key=True),
    Column("trial_id", ForeignKey("trials.id"), nullable=False),
    Index(None, "trial_id"),
)


# One message of a conversation, with the turn's own extra fields (a trace's tool calls,
# metrics, observation): the same step in every episode that holds it.
conversation_turns = Table(
    "conversation_turns", metadata,
    Column("conversation_id", ForeignKey("conversations.id"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("role", Text, nullable=False),
    Column("message_id", ForeignKey("messages.id"), nullable=True),
    Column("extra", Json, nullable=True),
    Index(None, "message_id"),
)


# The view `turns`: one message of an episode, as the table of that name held before
# conversations were stored once (migration 0014). Its rows are the episode's conversation's
# first n_turns turns.
turns = Table(
    "turns", views,
    Column("episode_id", Id, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("role", Text, nullable=False),
    Column("message_id", Id, nullable=True),
    Column("extra", Json, nullable=True),
)


# Distinct message text, stored once however many turns repeat it.
messages = Table(
    "messages", metadata,
    Column("id", Id, primary_key=True),
    Column("content_hash", Blob, unique=True, nullable=False),
    Column("content", Text, nullable=False),
    # The exact UTF-8 when `content` had to be made safe (NUL, lone surrogates); else NULL.
    Column("content_raw", Blob, nullable=True),
    Column("n_chars", Integer, nullable=False),
)


# --- provenance and conflicts ------------------------------------------------------------


# Which unit (and row of it) each episode came from; one episode can be in many. Every
# accepted row has one, including a row whose conversation conflicts with the stored episode
# (the conflict holds that row's conversation).
episode_loads = Table(
    "episode_loads", metadata,
    Column("load_id", ForeignKey("loads.id"), primary_key=True),
    Column("row_number", Integer, primary_key=True),
    Column("episode_id", ForeignKey("episodes.id"), nullable=False),
    # The row's own extra columns when they differ from the episode's ({} for none); else NULL.
    Column("extra", Json, nullable=True),
    Index(None, "episode_id"),
)


# Which units mention each trial, including trials that have no episodes.
trial_loads = Table(
    "trial_loads", metadata,
    Column("trial_id", ForeignKey("trials.id"), primary_key=True),
    Column("load_id", ForeignKey("loads.id"), primary_key=True),
    Index(None, "load_id"),
)


# The same natural key arrived with different content. The first version is kept; the
# other is described here so nothing is silently overwritten.
conflicts = Table(
    "conflicts", metadata,
    Column("id", Id, primary_key=True),
    Column("load_id", ForeignKey("loads.id"), nullable=False),
    Column("entity", Text, nullable=False),  # "trial" | "episode"
    Column("entity_id", Id, nullable=False),
    Column("field", Text, nullable=True),
    Column("kept", Json, nullable=True),
    Column("incoming", Json, nullable=True),
    Column("row_number", Integer, nullable=True),
    Column("created_at", UtcDateTime, nullable=False, server_default=func.current_timestamp()),
    Index(None, "load_id"),
)


# --- summaries ---------------------------------------------------------------------------
# Derived from the tables above by warehouse.summaries, in the same transaction as the unit that
# changed them, so the canned queries read thousands of rows instead of every trial and episode.
# No foreign keys: every row is made from rows that exist, and a refresh should not pay checks.


# How the trials of one run and task ended, per agent, model and exception type. A
# success is a reward of at least warehouse.summaries.SUCCESS_THRESHOLD (the canned queries'
# default); trials whose task is unknown have task_id NULL.
run_task_breakdown = Table(
    "run_task_breakdown", metadata,
    Column("id", Id, primary_key=True),
    Column("run_id", Id, nullable=False),
    Column("task_id", Id, nullable=True),
    Column("agent", Text, nullable=True),
    Column("model", Text, nullable=True),
    Column("exception_type", Text, nullable=True),
    Column("n_trials", Integer, nullable=False),
    Column("n_complete", Integer, nullable=False),
    Column("n_incomplete", Integer, nullable=False),
    Column("n_successes", Integer, nullable=False),
    Column("n_rewards", Integer, nullable=False),  # trials that have a reward
    Column("reward_sum", Float, nullable=True),
    Column("first_started", UtcDateTime, nullable=True),
    Column("last_started", UtcDateTime, nullable=True),
    # How many trials have each trajectory length measure (see trial_lengths).
    Column("n_with_trajectory", Integer, nullable=False),
    Column("n_with_input_tokens", Integer, nullable=False),
    Column("n_with_output_tokens", Integer, nullable=False),
    Column("model_name", Text, Computed(MODEL_NAME_SQL)),  # what pass-rate --by model groups by
    Index(None, "run_id", "task_id"),
    # Cover pass-rate's groups and the runs' agents and models, and the failures.
    Index("ix_run_task_breakdown_groups", "run_id", "agent", "model", "exception_type", "n_trials",
          "n_successes", "n_rewards", "reward_sum"),
    Index("ix_run_task_breakdown_failures", "exception_type", "run_id", "task_id", "n_trials"),
)


# run_task_breakdown summed over agent, model and exception type: one row per run and
# task, what the task-level queries read. n_errors counts the trials with an exception.
run_task_outcomes = Table(
    "run_task_outcomes", metadata,
    Column("id", Id, primary_key=True),
    Column("run_id", Id, nullable=False),
    Column("task_id", Id, nullable=True),
    Column("n_trials", Integer, nullable=False),
    Column("n_complete", Integer, nullable=False),
    Column("n_incomplete", Integer, nullable=False),
    Column("n_successes", Integer, nullable=False),
    Column("n_rewards", Integer, nullable=False),
    Column("reward_sum", Float, nullable=True),
    Column("n_errors", Integer, nullable=False),
    Column("first_started", UtcDateTime, nullable=True),
    Column("last_started", UtcDateTime, nullable=True),
    Column("n_with_trajectory", Integer, nullable=False),
    Column("n_with_input_tokens", Integer, nullable=False),
    Column("n_with_output_tokens", Integer, nullable=False),
    UniqueConstraint("run_id", "task_id"),
    # Covers the queries that go task by task (solve-matrix, pass-at-k, compare).
    Index("ix_run_task_outcomes_by_task", "task_id", "run_id", "n_trials", "n_successes"),
)


# Each trial's trajectory length: the turns and characters of its longest main episode, or
# of each step's longest summed over a multi-step trial's steps (NULL without one) and its token
# counts, indexed per run so percentiles are index reads.
trial_lengths = Table(
    "trial_lengths", metadata,
    Column("trial_id", Id, primary_key=True, autoincrement=False),
    Column("run_id", Id, nullable=False),
    Column("turns", Integer, nullable=True),
    Column("chars", Integer, nullable=True),
    Column("input_tokens", Id, nullable=True),
    Column("output_tokens", Id, nullable=True),
    *tuple(
        # Partial: only the trials that have the measure, the only ones a percentile ranks.
        Index(None, "run_id", measure, sqlite_where=text(f"{measure} IS NOT NULL"),
              postgresql_where=text(f"{measure} IS NOT NULL"))
        for measure in ("turns", "chars", "input_tokens", "output_tokens")
    ),
)


# The sources whose units mention a trial of the run.
run_sources = Table(
    "run_sources", metadata,
    Column("run_id", Id, primary_key=True, autoincrement=False),
    Column("source_id", Id, primary_key=True, autoincrement=False),
)
