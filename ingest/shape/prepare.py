"""Trials made ready for the writer, without the database: every text hashed once and split
into its stored form, every conversation hashed, every row shaped. What is left for the
writer is only what needs the database: looking rows up, giving them ids, writing them.

A Batch holds plain tuples, dicts, strings and bytes, so it crosses a process boundary
cheaply: a Parquet shard is read and prepared in a worker process (ingest.process.worker) while the
writer's process writes the previous batch.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ingest.shape.records import Episode, Prefix, Rejected, Trial, Turn
from warehouse.texts import RAW_TEXT, is_safe, safe_columns, split_text, to_bytes

# Trial columns that a second source may fill in when the first left them empty, and that
# are recorded as a conflict when both sources say something different.
TRIAL_FIELDS = (
    "agent", "agent_version", "model", "model_provider", "result", "reward", "rewards",
    "exception_type", "exception_message", "started_at", "finished_at", "date_raw",
    "n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd", "verifier_output",
    "task_checksum", "source_run_id", "instruction_id",
)
# A batch's trial is a tuple of these, in this order (see trial_row): a tuple, not a dict, as it
# crosses to the writer's process and is compared there whole.
TRIAL_ROW = ("run_key", "trial_name", "task_name", "status", *TRIAL_FIELDS, "detail")


def message_hash(text: str) -> bytes:
    return _hash_of(to_bytes(text))


def _hash_of(data: bytes) -> bytes:
    # A message's identity: changing it would make every stored text look new.
    return hashlib.sha256(data).digest()


def conversation_hash(episode: Episode) -> str:
    """The hash of an episode's roles and message hashes, in order."""
    digests = [message_hash(t.content) if t.content is not None else None for t in episode.turns]
    return roles_and_digests_hash([t.role for t in episode.turns], digests)


def roles_and_digests_hash(roles: list[str], digests: list[bytes | None]) -> str:
    return hashlib.sha256(b"".join(map(_turn_bytes, roles, digests))).hexdigest()


def _turn_bytes(role: str, digest: bytes | None) -> bytes:
    """What one turn adds to its conversation's hash (roles_and_digests_hash, _Run)."""
    return b"".join((_role_bytes(role), b"\x00", digest or b"-"))


@functools.lru_cache(maxsize=256)
def _role_bytes(role: str) -> bytes:
    # A handful of distinct roles, each seen on every turn: encode each once.
    return to_bytes(role)


class Messages:
    """The distinct texts of a batch, each encoded once: hashed and kept in its stored form (see
    message_row)."""

    def __init__(self) -> None:
        self.rows: dict[bytes, tuple[bytearray, bytes | None, int]] = {}

    def add(self, text: str) -> bytes:
        """The text's hash (message_hash), after keeping the text if it is new."""
        data = to_bytes(text)
        digest = _hash_of(data)
        if digest not in self.rows:
            self.rows[digest] = message_row(text, data)
        return digest

    def add_utf8(self, data: bytes, n_chars: int) -> bytes:
        """add() for a text given as valid UTF-8 of n_chars characters (a checked Arrow string),
        without decoding it: it is stored as it came unless it holds a NUL."""
        digest = _hash_of(data)
        if digest not in self.rows:
            safe = b"\x00" not in data
            self.rows[digest] = (bytearray(data), None, n_chars) if safe else message_row(data.decode(), data)
        return digest


@dataclass
class Turns:
    roles: list[str] = field(default_factory=list)
    digests: list[bytes | None] = field(default_factory=list)
    extras: list[dict | None] = field(default_factory=list)


@dataclass
class Batch:
    # Trials as TRIAL_ROW tuples (see trial_row).
    trials: list[tuple]
    # Every distinct text of the batch: hash -> (content, content_raw, n_chars), see message_row.
    messages: dict[bytes, tuple[bytearray, bytes | None, int]]
    # (trial position in `trials`, trace_source, episode_index, row_number or None, n_turns,
    #  n_chars, conversation_hash, extra, position of its first turn in `turns`)
    episodes: list[tuple[int, str, int, int | None, int, int, str, dict | None, int]]
    # Every episode's turns, one after the other, as three columns: role, message hash (None
    # for no content) and extra.
    turns: "Turns"
    rejected: list[Rejected] = field(default_factory=list)
    n_bytes: int = 0  # bytes of the source this batch was read from


def message_row(text: str, data: bytes | None = None) -> tuple[bytearray, bytes | None, int]:
    """(content, content_raw, n_chars): how a message's text is stored. `content` is the UTF-8
    of its display-safe copy, which the bulk writer stores as text: texts arrive from Parquet as
    UTF-8, and most are safe, so they go to the database without ever being decoded. It is a
    bytearray, which sqlite3 binds faster than a bytes (see bulk.Bulk._bind_processor).
    `data`: the text's exact UTF-8 (to_bytes), when the caller has it."""
    data = to_bytes(text) if data is None else data
    if is_safe(text):
        return bytearray(data), None, len(text)
    safe, _ = split_text(text)
    return bytearray(to_bytes(safe)), data, len(text)


def prepare(trials: list[Trial], rejected: list[Rejected] | None = None, n_bytes: int = 0) -> Batch:
    messages = Messages()

    def digest(text: str | None) -> bytes | None:
        return None if text is None else messages.add(text)

    out_trials = []
    episodes = []
    turns = Turns()
    runs: dict[int, _Run] = {}  # the runs of shared turns (Prefix.turns) taken so far, by id
    for position, t in enumerate(trials):
        out_trials.append(trial_row(t, digest(t.instruction)))
        for ep in t.episodes:
            run = runs.get(id(ep.turns.turns)) if isinstance(ep.turns, Prefix) else None
            if run is None or len(ep.turns) < run.taken:
                run = _Run(ep.turns.turns if isinstance(ep.turns, Prefix) else ep.turns, len(turns.roles))
                if isinstance(ep.turns, Prefix):
                    runs[id(ep.turns.turns)] = run
            n_chars, chash = run.take(len(ep.turns), turns, digest)
            episodes.append((position, ep.trace_source, ep.episode_index, ep.row_number, len(ep.turns), n_chars,
                             chash, ep.extra, run.first))
    return Batch(out_trials, messages.rows, episodes, turns, list(rejected or ()), n_bytes)


class _Run:
    """Turns that one or more episodes hold the prefixes of, taken into a batch's Turns once,
    from `first` on, as far as its longest episode reaches; the characters and the
    conversation_hash of each prefix are kept up as they are taken, so that n episodes sharing
    one trajectory's turns cost n, not n²."""

    def __init__(self, source: Sequence[Turn], first: int):
        self.source = source  # kept, so that its id is not another list's while the batch is made
        self.first = first
        self.taken = 0
        self.n_chars = 0
        self.hash = hashlib.sha256()  # roles_and_digests_hash of the turns taken

    def take(self, n: int, turns: Turns, digest: Callable[[str | None], bytes | None]) -> tuple[int, str]:
        """(n_chars, conversation_hash) of the first n turns, taking those not yet taken."""
        for turn in self.source[self.taken:n]:
            d = digest(turn.content)
            turns.roles.append(turn.role)
            turns.digests.append(d)
            turns.extras.append(turn.extra)
            self.hash.update(_turn_bytes(turn.role, d))
            self.n_chars += 0 if turn.content is None else len(turn.content)
        self.taken = max(self.taken, n)
        return self.n_chars, self.hash.copy().hexdigest()


def trial_row(t: Trial, instruction: bytes | None) -> tuple:
    """A trial as the TRIAL_ROW tuple of its stored columns, `instruction_id` holding its
    instruction's hash (the writer has the message's id) and `task_name` its task's name."""
    texts, exact = safe_columns(dict(verifier_output=t.verifier_output, exception_message=t.exception_message))
    detail = dict(t.detail or {})
    if exact:
        detail[RAW_TEXT] = exact
    return (
        t.run_key, t.trial_name, t.task_name, t.status, t.agent, t.agent_version, t.model, t.model_provider,
        t.result, t.reward, t.rewards, t.exception_type, texts["exception_message"], t.started_at,
        t.finished_at, t.date_raw, t.n_input_tokens, t.n_cache_tokens, t.n_output_tokens, t.cost_usd,
        texts["verifier_output"], t.task_checksum, t.source_run_id, instruction, detail or None,
    )
