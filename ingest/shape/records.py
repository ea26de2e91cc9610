"""The normalized records every reader produces and the writer consumes.

Readers (Hub Parquet shards, Harbor trace directories) know formats; the writer knows SQL.
These dataclasses are the only thing the two sides share, so a reader never touches the
database and the writer never parses a file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload


# How a Hub row names its episode (`episode-N`) and the column of its trace source: what the Hub
# reader parses, and what the writer keeps with a row that lands under another key.
EPISODE_RE = re.compile(r"episode-(\d+)\Z")
TRACE_SOURCE = "trace_source"


@dataclass
class Turn:
    """One message of an episode, in conversation order."""

    role: str
    content: str | None
    # Everything else the source says about this message: unknown keys of a Hub message
    # struct, or for trace directories the step's tool_calls, metrics, timestamp, step_id.
    extra: dict[str, Any] | None = None


class Prefix(Sequence):
    """The first `n` turns of a list that only grows: how a trajectory's episodes hold their
    conversation without each copying it. Episode k of a trajectory of n steps holds the turns
    up to step k; as lists they would be n²/2 references, as prefixes of the one list n.
    Shaping (ingest.shape.prepare) sees that episodes share their turns and takes each turn once.
    Equal to any sequence of the same turns."""

    __slots__ = ("turns", "n")

    def __init__(self, turns: list[Turn], n: int):
        self.turns = turns
        self.n = n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> Turn: ...
    @overload
    def __getitem__(self, i: slice) -> list[Turn]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.turns[: self.n][i]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.turns[i % self.n]

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns[: self.n])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == self.n and all(map(
            lambda a, b: a == b, self, other))

    def __repr__(self) -> str:
        return f"Prefix({self.n} of {len(self.turns)} turns)"


@dataclass
class Episode:
    """One exported episode: a conversation prefix of a trial, as Harbor's exporter makes it."""

    episode_index: int
    turns: Sequence[Turn]  # a list, or a Prefix of a list other episodes share
    trace_source: str = "main"
    # Position of the row inside its unit (a shard's row number; for a trace directory the
    # index of the episode in reading order), recorded as provenance.
    row_number: int | None = None
    # Optional per-row columns kept verbatim (tool_definitions, conversations_sharegpt,
    # token-id columns, any unknown column), and the raw `episode` string when it is not
    # exactly f"episode-{episode_index}".
    extra: dict[str, Any] | None = None


@dataclass
class Trial:
    """One attempt of a task in a run, with the episodes read for it from this unit."""

    run_key: str
    trial_name: str
    task_name: str | None = None
    status: str = "complete"  # "complete" | "incomplete" (no result.json)
    agent: str | None = None
    agent_version: str | None = None
    model: str | None = None
    model_provider: str | None = None
    # Raw `result` string as exported (reward, exception class name, or None) and its parse.
    result: str | None = None
    reward: float | None = None
    rewards: dict[str, float] | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # The trial start exactly as the source wrote it (Hub `date`, result.json `started_at`).
    date_raw: str | None = None
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    verifier_output: str | None = None
    instruction: str | None = None
    task_checksum: str | None = None
    # The `run_id` value the source carried (a job UUID, or the trial name for RL rollouts).
    source_run_id: str | None = None
    # Structured detail the hot columns do not hold: phase timings, step results, configs.
    detail: dict[str, Any] | None = None
    episodes: list[Episode] = field(default_factory=list)


@dataclass
class Run:
    """Run-level facts a source knows (a Harbor job's config.json/result.json)."""

    run_key: str
    name: str | None = None
    job_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: dict[str, Any] | None = None
    # Labels the source gives the run (a job config's dataset, n_attempts): set where the run
    # has no value for the key yet.
    labels: dict[str, str] | None = None


@dataclass
class Rejected:
    """A row or file a reader could not use: reported, counted, never silently dropped."""

    where: str  # "file.parquet row 17" or "trial_dir/result.json"
    reason: str
