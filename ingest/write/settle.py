"""A trial's Hub rows placed as if they had all arrived at once, whatever order they came in.

Where a Hub row lands (on which episode, under which key, as a duplicate, as another episode or
as a conflict) depends on what the trial holds when it arrives: the rows' natural keys cannot
tell apart the steps of a multi-step trial (Harbor exports each step as main episode-N), nor a
per-subagent dataset's rows (always main episode-0) from the main trajectory's. The writer
places rows as they come, which is right when nothing was there before; when a unit leaves a
trial in a state that could depend on what came first (a conflict, a row found under another
key, another episode, a row whose columns differ from the episode's, a trace directory arriving
after Hub rows of its trial), the trial's Hub rows are taken up and placed again here, all at
once. What the trial then holds is a function of the set of rows (the law that order never
matters, design.md §8):

1. A trace directory's episodes are the trial's truth (richer data wins): Hub rows never change
   them, and a row whose conversation is one of them lands on it.
2. Any other row's home is its own key, except that a row under "main" whose conversation
   another row carries under a subagent's trace source belongs to that subagent (a per-subagent
   dataset's rows are keyed main episode-0).
3. Under one home key, if one source holds several conversations there (a multi-step trial's
   steps), each is an episode; otherwise the first conversation in the rows' canonical order is
   the episode and the others are conflicts. The canonical order of rows is (source kind, source
   URI, unit, unit hash, row number). A home source's episodes form conversations keyed
   "<source>", "<source>#2", "#3"…: an episode goes on the conversation whose episode just before
   it is a prefix of it (the same step), else on the first with its index free, else on a new one.
4. A Hub-made episode keeps the columns of its first row in that order; every other row keeps
   its own where they differ (episode_loads.extra), as the writer does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select

from ingest.shape.records import EPISODE_RE, TRACE_SOURCE
from ingest.write import bulk
from warehouse.db import models
from warehouse.texts import to_bytes

if TYPE_CHECKING:
    from ingest.write.writer import UnitWriter

_CHUNK = 500


@dataclass
class HubRow:
    """One Hub row's contribution to a trial."""

    load_id: int
    row_number: int
    source_id: int
    order: tuple  # the canonical order (see the module docstring)
    key: tuple[str, int]  # (trace_source, episode_index) the row arrived under
    extra: dict[str, Any] | None  # its own columns, as it came
    content: str  # its conversation's hash


@dataclass
class Conversation:
    n_turns: int
    n_chars: int
    turns: list[tuple[str, int | None, Any]]  # (role, message_id, extra) in order


@dataclass
class Taken:
    """A trial's Hub rows and their conversations, taken out of the tables."""

    rows: list[HubRow]
    conversations: dict[str, Conversation]
    made: set[tuple[int, str]]  # (episode_index, conversation hash) of the episodes only they made


def hub_trials(w: UnitWriter, trial_ids: Iterable[int]) -> set[int]:
    """Those of the trials that hold a Hub row (an episode_loads row of a Parquet unit)."""
    T = w.tables
    ids = sorted(set(trial_ids))
    found: set[int] = set()
    for chunk in bulk.chunks(ids, _CHUNK):
        stmt = (select(T["episodes"].c.trial_id).distinct()
                .join(T["episode_loads"], T["episode_loads"].c.episode_id == T["episodes"].c.id)
                .join(T["loads"], T["loads"].c.id == T["episode_loads"].c.load_id)
                .where(T["episodes"].c.trial_id.in_(chunk), T["loads"].c.arrow_schema.is_not(None)))
        found.update(w.execute(stmt).scalars())
    return found


def hub_made(w: UnitWriter, episode_ids: Iterable[int]) -> set[int]:
    """The trials of those episodes that no trace directory gave (only Hub rows hold them)."""
    T = w.tables
    el, loads, episodes = T["episode_loads"], T["loads"], T["episodes"]
    ids = sorted(set(episode_ids))
    trials: set[int] = set()
    for chunk in bulk.chunks(ids, _CHUNK):
        traced = select(el.c.episode_id).join(loads, loads.c.id == el.c.load_id).where(
            el.c.episode_id.in_(chunk), loads.c.arrow_schema.is_(None))
        stmt = select(episodes.c.trial_id).distinct().where(episodes.c.id.in_(chunk), episodes.c.id.not_in(traced))
        trials.update(w.execute(stmt).scalars())
    return trials


def take_up(w: UnitWriter, trial_id: int) -> Taken:
    """Read the trial's Hub rows, then delete them and every episode only they made (with its
    turns and conflicts): the trial is left with what trace directories gave it."""
    T = w.tables
    episodes, el, loads, sources, conflicts = (
        T[n] for n in ("episodes", "episode_loads", "loads", "sources", "conflicts"))
    eps = {row.id: row for row in w.execute(select(
        episodes.c.id, episodes.c.trace_source, episodes.c.episode_index, episodes.c.n_turns, episodes.c.n_chars,
        episodes.c.conversation_hash, episodes.c.extra).where(episodes.c.trial_id == trial_id))}
    of_trial = select(episodes.c.id).where(episodes.c.trial_id == trial_id).scalar_subquery()
    provenance = w.execute(
        select(el.c.load_id, el.c.row_number, el.c.episode_id, el.c.extra, loads.c.arrow_schema.is_not(None).label("hub"),
               loads.c.unit, loads.c.content_hash, loads.c.source_id, sources.c.kind, sources.c.uri)
        .join(loads, loads.c.id == el.c.load_id).join(sources, sources.c.id == loads.c.source_id)
        .join(episodes, episodes.c.id == el.c.episode_id).where(episodes.c.trial_id == trial_id)).all()
    traced = {p.episode_id for p in provenance if not p.hub}
    hub_loads = {p.load_id for p in provenance if p.hub}
    made = [ep_id for ep_id in eps if ep_id not in traced]
    disagreed = {}  # (load_id, row_number) -> (conflict id, incoming)
    if hub_loads:
        for c in w.execute(select(conflicts.c.id, conflicts.c.load_id, conflicts.c.row_number, conflicts.c.incoming)
                            .where(conflicts.c.entity == "episode", conflicts.c.entity_id.in_(of_trial),
                                   conflicts.c.load_id.in_(sorted(hub_loads)))):
            disagreed[(c.load_id, c.row_number)] = (c.id, c.incoming)
    conversations: dict[str, Conversation] = {}
    stored = _turns(w, made)
    for ep_id in made:
        ep = eps[ep_id]
        conversations[ep.conversation_hash] = Conversation(ep.n_turns, ep.n_chars, stored.get(ep_id, []))
    rows = []
    for p in provenance:
        if not p.hub:
            continue
        ep = eps[p.episode_id]
        effective = p.extra if p.extra is not None else ep.extra
        if (p.load_id, p.row_number) in disagreed:
            incoming = disagreed[(p.load_id, p.row_number)][1]
            content = incoming["conversation_hash"]
            if content not in conversations:
                conversations[content] = _conversation(w, incoming)
        else:
            content = ep.conversation_hash
            if content not in conversations:  # a row on a trace episode: its conversation is the episode's
                conversations[content] = None  # type: ignore[assignment]
        key, extra = _arrived(effective, (ep.trace_source, ep.episode_index))
        rows.append(HubRow(p.load_id, p.row_number, p.source_id,
                           (p.kind, p.uri, p.unit, p.content_hash, p.row_number), key, extra, content))
    # Deleted: the conflicts of Hub rows, their provenance, and the episodes only they made.
    for ids in bulk.chunks(sorted(i for i, _ in disagreed.values()), _CHUNK):
        w.execute(delete(conflicts).where(conflicts.c.id.in_(ids)))
    for ids in bulk.chunks(sorted(hub_loads), _CHUNK):
        w.execute(delete(el).where(el.c.load_id.in_(ids), el.c.episode_id.in_(of_trial)))
    for ids in bulk.chunks(made, _CHUNK):
        w.execute(delete(episodes).where(episodes.c.id.in_(ids)))
    w.forget_episodes(trial_id)
    if made:
        w.conversations.prune(trial_id)
    return Taken(rows, conversations, {(eps[i].episode_index, eps[i].conversation_hash) for i in made})


def place(w: UnitWriter, trial_id: int, taken: Taken) -> None:
    """Write the trial's Hub rows as if they had all arrived at once (the module docstring)."""
    T = w.tables
    episodes = T["episodes"]
    trace = {(row.trace_source, row.episode_index): (row.id, row.conversation_hash, row.extra)
             for row in w.execute(select(episodes.c.id, episodes.c.trace_source, episodes.c.episode_index,
                                          episodes.c.conversation_hash, episodes.c.extra)
                                   .where(episodes.c.trial_id == trial_id))}
    # A trace directory's episode that one only Hub rows made held before is no new episode.
    replaced = sum(1 for key, (ep_id, chash, _) in trace.items()
                   if ep_id in w.created_episodes and (key[1], chash) in taken.made)
    w.counts.n_episodes_new -= replaced
    w.counts.n_episodes_duplicate += replaced
    on_trace: dict[tuple[int, str], list[tuple[str, int]]] = {}
    for key, (_, chash, _) in sorted(trace.items()):
        on_trace.setdefault((key[1], chash), []).append(key)
    rows = sorted(taken.rows, key=lambda r: r.order)
    subagent_of: dict[tuple[int, str], str] = {}
    for r in rows:
        if r.key[0] != "main":
            held = subagent_of.get((r.key[1], r.content))
            subagent_of[(r.key[1], r.content)] = r.key[0] if held is None else min(held, r.key[0])

    def home(r: HubRow) -> tuple[str, int]:
        found = on_trace.get((r.key[1], r.content))
        if found:
            return r.key if r.key in found else found[0]
        if r.key[0] == "main":
            return (subagent_of.get((r.key[1], r.content), "main"), r.key[1])
        return r.key

    homes: dict[tuple[str, int], list[HubRow]] = {}
    for r in rows:
        homes.setdefault(home(r), []).append(r)

    new_episodes: list[tuple] = []  # (key, content, extra)
    landing: list[tuple[HubRow, tuple[str, int]]] = []  # each row and the key of its episode
    taken_keys = set(trace)
    # Per home trace source, its conversations ("<source>", "<source>#2"…) and the conversation
    # each holds at each index: a step's episodes are prefixes of one another, so an episode
    # goes on after the one its conversation extends.
    chains: dict[str, list[dict[int, str]]] = {}
    for key in sorted(homes):
        group = homes[key]
        if key in trace:
            landing += [(r, key) for r in group]
            continue
        order = list(dict.fromkeys(r.content for r in group))
        per_source: dict[int, set[str]] = {}
        for r in group:
            per_source.setdefault(r.source_id, set()).add(r.content)
        steps = len(order) > 1 and max(map(len, per_source.values())) > 1
        placed: dict[str, tuple[str, int]] = {}
        for content in order if steps else order[:1]:
            at = _chain_key(chains.setdefault(key[0], []), key, content, taken.conversations, taken_keys)
            taken_keys.add(at)
            first = next(r for r in group if r.content == content)
            extra = first.extra if at == first.key else own_key(first.extra, first.key)
            new_episodes.append((at, content, extra))
            placed[content] = at
        landing += [(r, placed.get(r.content, placed[order[0]])) for r in group]

    # The episodes only Hub rows make, each on its conversation.
    ids = w.bulk.allocate_ids(episodes, len(new_episodes))
    made: dict[tuple[str, int], tuple[int, str, Any]] = {}
    columns: list[list[Any]] = [[] for _ in range(9)]
    for ep_id, (key, content, extra) in zip(ids, new_episodes):
        conv = taken.conversations[content]
        roles, message_ids, turn_extras = (list(c) for c in zip(*conv.turns)) if conv.turns else ([], [], [])
        conversation_id = w.conversations.place(trial_id, roles, message_ids, turn_extras)
        for col, value in zip(columns, (ep_id, trial_id, key[0], key[1], conv.n_turns, conv.n_chars, content, extra,
                                        conversation_id)):
            col.append(value)
        made[key] = (ep_id, content, extra)
    w.bulk.insert(episodes, ["id", "trial_id", "trace_source", "episode_index", "n_turns", "n_chars",
                             "conversation_hash", "extra", "conversation_id"], columns)

    provenance: list[list[Any]] = [[] for _ in range(4)]
    for r, key in landing:
        ep_id, kept, episode_extra = made[key] if key in made else trace[key]
        extra = r.extra if key == r.key else own_key(r.extra, r.key)
        own = None if extra_key(extra) == extra_key(episode_extra) else (extra or {})
        for col, value in zip(provenance, (r.load_id, r.row_number, ep_id, own)):
            col.append(value)
        if r.content != kept:
            conv = taken.conversations[r.content]
            w.conflict_row(r.load_id, "episode", ep_id, "conversation", {"conversation_hash": kept},
                           {"conversation_hash": r.content, "n_turns": conv.n_turns,
                            "turns": [list(t) for t in conv.turns]}, r.row_number)
    w.bulk.insert(T["episode_loads"], ["load_id", "row_number", "episode_id", "extra"], provenance)
    w.touched_trials.add(trial_id)


def _chain_key(chains: list[dict[int, str]], key: tuple[str, int], content: str,
               conversations: dict[str, Conversation], taken: set[tuple[str, int]]) -> tuple[str, int]:
    """The key of the episode `content` makes at `key`'s index: on the conversation whose episode
    just before it is a prefix of it (the same step), else on the first with that index free,
    else on a new one. Conversation n of source s is keyed s, then s#2, s#3…"""
    source, index = key

    def name(n: int) -> str:
        return source if n == 0 else f"{source}#{n + 1}"

    free = [n for n in range(len(chains)) if index not in chains[n] and (name(n), index) not in taken]
    extends = [n for n in free if index - 1 in chains[n]
               and _is_prefix(conversations.get(chains[n][index - 1]), conversations.get(content))]
    if extends or free:
        n = (extends or free)[0]
    else:
        n = len(chains)
        while (name(n), index) in taken:  # a name a trace directory's episode has
            n += 1
        chains.extend({} for _ in range(n + 1 - len(chains)))
    chains[n][index] = content
    return (name(n), index)


def _is_prefix(before: Conversation | None, after: Conversation | None) -> bool:
    if before is None or after is None or len(before.turns) > len(after.turns):
        return False
    return all(a[:2] == b[:2] for a, b in zip(before.turns, after.turns))


def own_key(extra: dict | None, key: tuple[str, int]) -> dict:
    """A row's extra columns with the trace_source and episode it arrived under (`key`), where it
    lands on an episode under another key (unless it carried their raw strings already), so that
    an export of its source writes them back. _arrived undoes it."""
    source, index = key
    own = dict(extra or {})
    own.setdefault(TRACE_SOURCE, source)
    own.setdefault("episode", f"episode-{index}")
    return own


def extra_key(extra: dict | None) -> bytes | None:
    """A fingerprint of an episode's extra columns (None for none): what the writer's episode
    cache keeps instead of them, since they can be as large as the conversation (a ShareGPT
    copy of it)."""
    if not extra:
        return None
    text = json.dumps(extra, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.blake2b(to_bytes(text), digest_size=16).digest()


def _arrived(extra: dict[str, Any] | None, stored_key: tuple[str, int]) -> tuple[tuple[str, int], dict | None]:
    """The key a row arrived under and its own columns as it came, from the columns it is
    stored with: a row kept on an episode under another key carries its own trace_source and
    episode (own_key), which are taken off again unless they were its raw strings (a
    null or empty trace_source; an episode not written episode-N)."""
    if not extra:
        return stored_key, None
    own = dict(extra)
    source, index = stored_key
    if TRACE_SOURCE in own:
        raw = own[TRACE_SOURCE]
        if isinstance(raw, str) and raw:
            source = raw
            del own[TRACE_SOURCE]
        else:
            source = "main"
    if "episode" in own and isinstance(own["episode"], str):
        match = EPISODE_RE.match(own["episode"])
        if match is not None:
            index = int(match.group(1))
            if own["episode"] == f"episode-{index}":
                del own["episode"]
    return (source, index), own or None


def _turns(w: UnitWriter, episode_ids: list[int]) -> dict[int, list[tuple[str, int | None, Any]]]:
    turns = models.turns  # the view: each episode's turns
    out: dict[int, list[tuple[str, int | None, Any]]] = {}
    for ids in bulk.chunks(sorted(episode_ids), _CHUNK):
        for row in w.execute(select(turns.c.episode_id, turns.c.role, turns.c.message_id, turns.c.extra)
                              .where(turns.c.episode_id.in_(ids)).order_by(turns.c.episode_id, turns.c.idx)):
            out.setdefault(row.episode_id, []).append((row.role, row.message_id, row.extra))
    return out


def _conversation(w: UnitWriter, incoming: dict[str, Any]) -> Conversation:
    """A conflicting row's conversation, as its conflict keeps it."""
    messages = w.tables["messages"]
    turns = [(role, message_id, extra) for role, message_id, extra in incoming["turns"]]
    ids = sorted({mid for _, mid, _ in turns if mid is not None})
    n_chars = dict.fromkeys(ids, 0)
    for chunk in bulk.chunks(ids, _CHUNK):
        n_chars.update(w.execute(select(messages.c.id, messages.c.n_chars).where(messages.c.id.in_(chunk))).all())
    return Conversation(len(turns), sum(n_chars[mid] for _, mid, _ in turns if mid is not None), turns)
