"""A trial's conversations, each stored once: every episode is a prefix of one of them.

Harbor exports each episode of a trajectory whole, the turns before it included. The writer
stores a trial's turns once per conversation (`conversations`, `conversation_turns`) and an
episode as its conversation and its length (`episodes.conversation_id`, `n_turns`).

Which conversations a trial has depends only on its episodes, never on the order they came in:
they are the longest of the episodes' turn lists, none a prefix of another. An arriving episode
that is a prefix of a stored conversation points at it; one that a stored conversation is a
prefix of extends it (its further turns appended); any other (a summarized or edited history,
a subagent) is a conversation of its own. Two stored conversations are never prefixes of one
another, so at most one can be extended. A turn is its role, its message and its own extra
fields (a trace's tool calls, metrics, observation): two episodes that differ in a turn's extra
are different conversations, so each episode's turns read back exactly as they came.

Conversations never cross trials. When episodes leave a trial (ingest.write.settle takes a
trial's Hub rows up and places them again), prune() shortens or drops what no episode reaches
any more and merges a conversation that became a prefix of another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update

if TYPE_CHECKING:
    from ingest.write.writer import UnitWriter

def turn_key(role: str, message_id: int | None, extra: Any) -> bytes:
    """A turn's identity in this warehouse: role, message and extra fields."""
    extra_text = "" if extra is None else json.dumps(extra, sort_keys=True, separators=(",", ":"), default=str)
    return f"{role}\x00{message_id}\x00{extra_text}".encode("utf-8", "surrogatepass")


def prefix_hashes(keys: Sequence[bytes]) -> list[bytes]:
    """The hash of each prefix of a turn list (position i: its first i + 1 turns)."""
    out, h = [], b""
    for key in keys:
        h = hashlib.blake2b(h + key, digest_size=16).digest()
        out.append(h)
    return out


@dataclass
class _Conversation:
    id: int
    hashes: list[bytes]  # prefix_hashes of its turns


@dataclass
class _Trial:
    conversations: list[_Conversation] = field(default_factory=list)
    prefixes: dict[tuple[int, bytes], _Conversation] = field(default_factory=dict)  # (length, hash) ->
    # A conversation stored whole whose prefixes are not hashed yet, with its turns (roles,
    # message ids, extras): see Conversations.place_prefixes.
    unhashed: list[tuple[_Conversation, tuple[Sequence, Sequence, Sequence]]] = field(default_factory=list)

    def add(self, conv: _Conversation, start: int = 0) -> None:
        for n in range(start, len(conv.hashes)):
            self.prefixes.setdefault((n + 1, conv.hashes[n]), conv)

    def hash_waiting(self) -> None:
        for conv, turns in self.unhashed:
            conv.hashes = prefix_hashes(list(map(turn_key, *turns)))
            self.add(conv)
        self.unhashed.clear()


class Conversations:
    """The conversations of the trials a unit writes, cached for the unit."""

    def __init__(self, writer: UnitWriter):
        self.w = writer
        self._trials: dict[int, _Trial] = {}

    def place(self, trial_id: int, roles: Sequence[str], message_ids: Sequence[int | None],
              extras: Sequence[Any]) -> int | None:
        """The id of the conversation an episode of the trial with these turns is a prefix of,
        storing or extending one as needed; None for an episode of no turns."""
        return self.place_prefixes(trial_id, roles, message_ids, extras, [len(roles)])[0]

    def place_prefixes(self, trial_id: int, roles: Sequence[str], message_ids: Sequence[int | None],
                       extras: Sequence[Any], lengths: Sequence[int]) -> list[int | None]:
        """place() for the episodes whose turns are the first `lengths` of these (a trajectory's
        episodes): the turns are placed whole, once, and each prefix is then found among the
        trial's conversations, so that a trajectory of n steps costs n, not n²."""
        if not roles:
            return [None] * len(lengths)
        trial = self._trial(trial_id)
        if not trial.conversations and trial_id in self.w.created_trials:
            # A trial this unit created, placed for the first time (every trial of a first
            # load): its turns are a conversation of their own, and every episode given is a
            # prefix of it. Its prefixes are hashed only when the trial is placed again, which
            # most trials never are (on the math profile, a quarter of the placing's time).
            found = self._store(trial, trial_id)
            trial.unhashed.append((found, (roles, message_ids, extras)))
            self._store_turns(found, 0, roles, message_ids, extras)
            return [found.id if k else None for k in lengths]
        trial.hash_waiting()
        hashes = prefix_hashes(list(map(turn_key, roles, message_ids, extras)))
        n = len(hashes)
        if (n, hashes[-1]) not in trial.prefixes:
            start, found = 0, None
            for conv in trial.conversations:
                if len(conv.hashes) < n and hashes[len(conv.hashes) - 1] == conv.hashes[-1]:
                    found, start = conv, len(conv.hashes)
                    break
            if found is None:
                found = self._store(trial, trial_id)
            found.hashes += hashes[start:]
            trial.add(found, start)
            self._store_turns(found, start, roles, message_ids, extras)
        return [trial.prefixes[(k, hashes[k - 1])].id if k else None for k in lengths]

    def _store(self, trial: _Trial, trial_id: int) -> _Conversation:
        """A new conversation of the trial, with no turns yet."""
        conv = _Conversation(self.w.bulk.allocate_ids(self.w.tables["conversations"], 1)[0], [])
        trial.conversations.append(conv)
        self.w.bulk.insert(self.w.tables["conversations"], ["id", "trial_id"], [[conv.id], [trial_id]])
        return conv

    def _store_turns(self, conv: _Conversation, start: int, roles: Sequence[str],
                     message_ids: Sequence[int | None], extras: Sequence[Any]) -> None:
        """The turns from `start` on appended to the conversation."""
        n = len(roles)
        self.w.counts.n_turns_stored += n - start
        self.w.bulk.insert(self.w.tables["conversation_turns"],
                           ["conversation_id", "idx", "role", "message_id", "extra"],
                           [[conv.id] * (n - start), range(start, n), roles[start:], message_ids[start:],
                            extras[start:]])

    def _trial(self, trial_id: int) -> _Trial:
        trial = self._trials.get(trial_id)
        if trial is None:
            trial = self._trials[trial_id] = _Trial()
            if trial_id not in self.w.created_trials:
                for conv in _stored(self.w, trial_id):
                    trial.conversations.append(conv)
                    trial.add(conv)
        return trial

    def forget(self, trial_id: int) -> None:
        self._trials.pop(trial_id, None)

    def clear(self) -> None:
        self._trials.clear()

    def prune(self, trial_id: int) -> None:
        """After episodes of the trial were deleted: each conversation keeps the turns its
        longest episode reaches (none: it goes), and one that is then a prefix of another is
        merged into it, so the trial's conversations are again those its episodes make."""
        T = self.w.tables
        conversations, turns, episodes = T["conversations"], T["conversation_turns"], T["episodes"]
        self.forget(trial_id)
        of_trial = select(conversations.c.id).where(conversations.c.trial_id == trial_id)
        reach = (select(func.coalesce(func.max(episodes.c.n_turns), 0))
                 .where(episodes.c.conversation_id == turns.c.conversation_id).scalar_subquery())
        self.w.execute(delete(turns).where(turns.c.conversation_id.in_(of_trial), turns.c.idx >= reach))
        self.w.execute(delete(conversations).where(
            conversations.c.trial_id == trial_id,
            ~select(episodes.c.id).where(episodes.c.conversation_id == conversations.c.id).exists()))
        stored = sorted(_stored(self.w, trial_id), key=lambda c: (-len(c.hashes), c.id))
        kept = _Trial()
        for conv in stored:
            into = kept.prefixes.get((len(conv.hashes), conv.hashes[-1]))
            if into is None:
                kept.conversations.append(conv)
                kept.add(conv)
                continue
            self.w.execute(update(episodes).where(episodes.c.conversation_id == conv.id).values(conversation_id=into.id))
            self.w.execute(delete(turns).where(turns.c.conversation_id == conv.id))
            self.w.execute(delete(conversations).where(conversations.c.id == conv.id))
        self._trials[trial_id] = kept


def _stored(w: UnitWriter, trial_id: int) -> list[_Conversation]:
    """The trial's stored conversations, with their prefix hashes."""
    T = w.tables
    conversations, turns = T["conversations"], T["conversation_turns"]
    keys: dict[int, list[bytes]] = {}
    for conv_id, role, message_id, extra in w.execute(
            select(turns.c.conversation_id, turns.c.role, turns.c.message_id, turns.c.extra)
            .join(conversations, conversations.c.id == turns.c.conversation_id)
            .where(conversations.c.trial_id == trial_id).order_by(turns.c.conversation_id, turns.c.idx)):
        keys.setdefault(conv_id, []).append(turn_key(role, message_id, extra))
    return [_Conversation(conv_id, prefix_hashes(k)) for conv_id, k in keys.items()]
