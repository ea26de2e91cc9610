"""The warehouse schema. Table and column names are the public interface people write SQL
against: add columns freely, rename nothing. Alembic revisions copy these definitions rather
than import them, so a revision keeps meaning what it meant when it was written."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from warehouse.db.types import Blob, Id, Json, UtcDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# A model without its provider prefix: the last '/'-separated segment of `model`
# ("openrouter/anthropic/claude-sonnet-4" -> "claude-sonnet-4"), computed by the database (see
# migration 0008). rtrim(m, chars) strips the trailing characters that are not '/'.
MODEL_NAME_SQL = "substr(model, length(rtrim(model, replace(model, '/', ''))) + 1)"


def model_name_column() -> Any:
    return mapped_column(Text, Computed(MODEL_NAME_SQL))


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        int: Integer,
        str: Text,
        float: Float,
        datetime: UtcDateTime,
        dict[str, Any]: Json,
        bytes: Blob,
    }


def created_at() -> Mapped[datetime]:
    return mapped_column(UtcDateTime, server_default=func.current_timestamp())


# --- the ingest ledger -------------------------------------------------------------------


class Source(Base):
    """A Hub dataset, a local Parquet folder or file, or a trace directory root."""

    __tablename__ = "sources"
    __table_args__ = (UniqueConstraint("kind", "uri"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    kind: Mapped[str]  # "hub" | "parquet" | "traces"
    uri: Mapped[str]
    name: Mapped[str]
    revision: Mapped[str | None]
    card: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = created_at()


class Load(Base):
    """One ingested unit (a Parquet shard or a trial directory), written in the same
    transaction as its rows: if the ledger says a unit loaded, all of it did. A unit is its name
    and its content: two byte-identical shards of a dataset are two units."""

    __tablename__ = "loads"
    __table_args__ = (UniqueConstraint("source_id", "unit", "content_hash"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("sources.id"))
    unit: Mapped[str]  # path of the shard or trial directory, relative to the source
    content_hash: Mapped[str]
    status: Mapped[str]  # "loaded"
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]
    tool_version: Mapped[str]
    n_rows: Mapped[int] = mapped_column(default=0)
    n_trials: Mapped[int] = mapped_column(default=0)
    n_episodes_new: Mapped[int] = mapped_column(default=0)
    n_episodes_duplicate: Mapped[int] = mapped_column(default=0)
    n_conflicts: Mapped[int] = mapped_column(default=0)
    n_rejected: Mapped[int] = mapped_column(default=0)
    n_turns: Mapped[int] = mapped_column(default=0)
    n_bytes: Mapped[int] = mapped_column(default=0)
    # The shard's Arrow schema, so an export can write the columns back with their types.
    arrow_schema: Mapped[str | None]
    detail: Mapped[dict[str, Any] | None]


# --- what was run ------------------------------------------------------------------------


class Run(Base):
    """A Harbor job, an RL run or a sweep. `run_key` is the job UUID, or for RL rollouts
    (whose run_id is only the trial name) the name the source was ingested under."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_key: Mapped[str] = mapped_column(unique=True)
    name: Mapped[str | None]
    job_id: Mapped[str | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    detail: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = created_at()


class RunLabel(Base):
    """A `key=value` label on a run (`step=13`): given at ingest (`--label`), later
    (`warehouse runs label`), or taken from what a source says (a dataset card, a job config)."""

    __tablename__ = "run_labels"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    key: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[str]
    created_at: Mapped[datetime] = created_at()

    __table_args__ = (Index("ix_run_labels_key_value", "key", "value"),)


class Task(Base):
    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(unique=True)
    checksum: Mapped[str | None]
    created_at: Mapped[datetime] = created_at()


class Trial(Base):
    """One attempt of a task in a run. `result` is the exported string kept raw; `reward`
    and `exception_type` are its parse (or, from trace directories, the full truth)."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("run_id", "trial_name"),
        Index(None, "task_id"),
        # Covers the cross-run queries (grouped by run and task, outcome columns only), so
        # they never read the wide rows. See migration 0003.
        Index("ix_trials_outcomes", "run_id", "task_id", "reward", "exception_type", "status", "agent",
              "model", "started_at"),
        Index(None, "instruction_id"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"))
    trial_name: Mapped[str]
    status: Mapped[str]  # "complete" | "incomplete"
    agent: Mapped[str | None]
    agent_version: Mapped[str | None]
    model: Mapped[str | None]  # as the source wrote it (and as exports write it)
    model_provider: Mapped[str | None]
    result: Mapped[str | None]
    reward: Mapped[float | None]
    rewards: Mapped[dict[str, Any] | None]
    exception_type: Mapped[str | None]
    exception_message: Mapped[str | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    date_raw: Mapped[str | None]
    n_input_tokens: Mapped[int | None] = mapped_column(Id)
    n_cache_tokens: Mapped[int | None] = mapped_column(Id)
    n_output_tokens: Mapped[int | None] = mapped_column(Id)
    cost_usd: Mapped[float | None]
    verifier_output: Mapped[str | None]
    instruction_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id"))
    task_checksum: Mapped[str | None]
    source_run_id: Mapped[str | None]
    # Phase timings, step results, configs, and the exact bytes of any text column whose
    # value could not be stored as is (see warehouse.texts).
    detail: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = created_at()
    model_name: Mapped[str | None] = model_name_column()  # `model` without its provider prefix


class Episode(Base):
    """One exported episode of a trial: the first `n_turns` turns of its conversation (NULL for
    an episode of no turns). `conversation_hash` decides whether a second copy from another
    source is a duplicate (same hash) or a conflict (different hash)."""

    __tablename__ = "episodes"
    __table_args__ = (UniqueConstraint("trial_id", "trace_source", "episode_index"),
                      Index(None, "conversation_id", "n_turns"))

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"))
    trace_source: Mapped[str]
    episode_index: Mapped[int]
    n_turns: Mapped[int]
    n_chars: Mapped[int]
    conversation_hash: Mapped[str]
    extra: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = created_at()
    conversation_id: Mapped[int | None] = mapped_column(ForeignKey("conversations.id"))


class Conversation(Base):
    """A trial's conversation, stored once: each of the trial's episodes is a prefix of one. A
    trial's conversations are the longest of its episodes' turn lists (role, message and turn
    extra): none is a prefix of another, whatever order the episodes came in (see
    ingest.write.conversations)."""

    __tablename__ = "conversations"
    __table_args__ = (Index(None, "trial_id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"))


class ConversationTurn(Base):
    """One message of a conversation, with the turn's own extra fields (a trace's tool calls,
    metrics, observation): the same step in every episode that holds it."""

    __tablename__ = "conversation_turns"
    __table_args__ = (Index(None, "message_id"),)

    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id"), primary_key=True)
    idx: Mapped[int] = mapped_column(primary_key=True)
    role: Mapped[str]
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id"))
    extra: Mapped[dict[str, Any] | None]


class View(DeclarativeBase):
    """Views, made by the migrations (not tables: kept out of Base.metadata)."""

    type_annotation_map = Base.type_annotation_map


class Turn(View):
    """The view `turns`: one message of an episode, as the table of that name held before
    conversations were stored once (migration 0014). Its rows are the episode's conversation's
    first n_turns turns."""

    __tablename__ = "turns"

    episode_id: Mapped[int] = mapped_column(Id, primary_key=True)
    idx: Mapped[int] = mapped_column(primary_key=True)
    role: Mapped[str]
    message_id: Mapped[int | None] = mapped_column(Id)
    extra: Mapped[dict[str, Any] | None]


class Message(Base):
    """Distinct message text, stored once however many turns repeat it."""

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    content_hash: Mapped[bytes] = mapped_column(unique=True)
    content: Mapped[str]
    # The exact UTF-8 when `content` had to be made safe (NUL, lone surrogates); else NULL.
    content_raw: Mapped[bytes | None]
    n_chars: Mapped[int]


# --- provenance and conflicts ------------------------------------------------------------


class EpisodeLoad(Base):
    """Which unit (and row of it) each episode came from; one episode can be in many. Every
    accepted row has one, including a row whose conversation conflicts with the stored episode
    (the conflict holds that row's conversation)."""

    __tablename__ = "episode_loads"
    __table_args__ = (Index(None, "episode_id"),)

    load_id: Mapped[int] = mapped_column(ForeignKey("loads.id"), primary_key=True)
    row_number: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"))
    # The row's own extra columns when they differ from the episode's ({} for none); else NULL.
    extra: Mapped[dict[str, Any] | None]


class TrialLoad(Base):
    """Which units mention each trial, including trials that have no episodes."""

    __tablename__ = "trial_loads"
    __table_args__ = (Index(None, "load_id"),)

    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"), primary_key=True)
    load_id: Mapped[int] = mapped_column(ForeignKey("loads.id"), primary_key=True)


class Conflict(Base):
    """The same natural key arrived with different content. The first version is kept; the
    other is described here so nothing is silently overwritten."""

    __tablename__ = "conflicts"
    __table_args__ = (Index(None, "load_id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    load_id: Mapped[int] = mapped_column(ForeignKey("loads.id"))
    entity: Mapped[str]  # "trial" | "episode"
    entity_id: Mapped[int] = mapped_column(Id)
    field: Mapped[str | None]
    kept: Mapped[dict[str, Any] | None]
    incoming: Mapped[dict[str, Any] | None]
    row_number: Mapped[int | None]
    created_at: Mapped[datetime] = created_at()


# --- summaries ---------------------------------------------------------------------------
# Derived from the tables above by warehouse.summaries, in the same transaction as the unit that
# changed them, so the canned queries read thousands of rows instead of every trial and episode.
# No foreign keys: every row is made from rows that exist, and a refresh should not pay checks.


class RunTaskBreakdown(Base):
    """How the trials of one run and task ended, per agent, model and exception type. A
    success is a reward of at least warehouse.summaries.SUCCESS_THRESHOLD (the canned queries'
    default); trials whose task is unknown have task_id NULL."""

    __tablename__ = "run_task_breakdown"
    __table_args__ = (
        Index(None, "run_id", "task_id"),
        # Cover pass-rate's groups and the runs' agents and models, and the failures.
        Index("ix_run_task_breakdown_groups", "run_id", "agent", "model", "exception_type", "n_trials",
              "n_successes", "n_rewards", "reward_sum"),
        Index("ix_run_task_breakdown_failures", "exception_type", "run_id", "task_id", "n_trials"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(Id)
    task_id: Mapped[int | None] = mapped_column(Id)
    agent: Mapped[str | None]
    model: Mapped[str | None]
    exception_type: Mapped[str | None]
    n_trials: Mapped[int]
    n_complete: Mapped[int]
    n_incomplete: Mapped[int]
    n_successes: Mapped[int]
    n_rewards: Mapped[int]  # trials that have a reward
    reward_sum: Mapped[float | None]
    first_started: Mapped[datetime | None]
    last_started: Mapped[datetime | None]
    # How many trials have each trajectory length measure (see TrialLength).
    n_with_trajectory: Mapped[int]
    n_with_input_tokens: Mapped[int]
    n_with_output_tokens: Mapped[int]
    model_name: Mapped[str | None] = model_name_column()  # what pass-rate --by model groups by


class RunTaskOutcome(Base):
    """run_task_breakdown summed over agent, model and exception type: one row per run and
    task, what the task-level queries read. n_errors counts the trials with an exception."""

    __tablename__ = "run_task_outcomes"
    __table_args__ = (
        UniqueConstraint("run_id", "task_id"),
        # Covers the queries that go task by task (solve-matrix, pass-at-k, compare).
        Index("ix_run_task_outcomes_by_task", "task_id", "run_id", "n_trials", "n_successes"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(Id)
    task_id: Mapped[int | None] = mapped_column(Id)
    n_trials: Mapped[int]
    n_complete: Mapped[int]
    n_incomplete: Mapped[int]
    n_successes: Mapped[int]
    n_rewards: Mapped[int]
    reward_sum: Mapped[float | None]
    n_errors: Mapped[int]
    first_started: Mapped[datetime | None]
    last_started: Mapped[datetime | None]
    n_with_trajectory: Mapped[int]
    n_with_input_tokens: Mapped[int]
    n_with_output_tokens: Mapped[int]


class TrialLength(Base):
    """Each trial's trajectory length: the turns and characters of its longest main episode, or
    of each step's longest summed over a multi-step trial's steps (NULL without one) and its token counts, indexed per run so percentiles are index reads."""

    __tablename__ = "trial_lengths"
    __table_args__ = tuple(
        # Partial: only the trials that have the measure, the only ones a percentile ranks.
        Index(None, "run_id", measure, sqlite_where=text(f"{measure} IS NOT NULL"),
              postgresql_where=text(f"{measure} IS NOT NULL"))
        for measure in ("turns", "chars", "input_tokens", "output_tokens")
    )

    trial_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    run_id: Mapped[int] = mapped_column(Id)
    turns: Mapped[int | None]
    chars: Mapped[int | None]
    input_tokens: Mapped[int | None] = mapped_column(Id)
    output_tokens: Mapped[int | None] = mapped_column(Id)


class RunSource(Base):
    """The sources whose units mention a trial of the run."""

    __tablename__ = "run_sources"

    run_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    source_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
