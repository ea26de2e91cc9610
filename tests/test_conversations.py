"""A conversation is stored once; an episode is a prefix of one (ingest.write.conversations,
migration 0014): turns stored once per distinct conversation of a trial, whatever order the
episodes come in, each episode's turns (the view `turns`) read back exactly, and a warehouse
converted in place by the migration holding what a fresh load holds."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from canonical import differences, dump
from test_load_order import PROVENANCE, fresh  # noqa: F401 (a fixture)
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from warehouse.db import schema

RUN = "5de746de-0000-4000-8000-00000000c0c0"
TOOL = {"tool_calls": [{"name": "bash", "arguments": {"cmd": "ls"}}], "metrics": {"cost": 0.5}}


def _turns(*spec: str) -> list[Turn]:
    """'u:a' is a user turn of text a; 'a:b+' an assistant turn with a tool call as its extra."""
    out = []
    for item in spec:
        role, content = item.split(":")
        extra = TOOL if content.endswith("+") else None
        out.append(Turn({"u": "user", "a": "assistant"}[role], content.rstrip("+"), extra))
    return out


# One trial's episodes: 1 extends 0; 2 diverges from 1 at its last turn; 3 has 0's texts but a
# turn extra of its own; 4 has no turns; a subagent's conversation; a summarized history.
EPISODES = [
    Episode(0, _turns("u:task", "a:look"), "main"),
    Episode(1, _turns("u:task", "a:look", "u:out", "a:fix"), "main"),
    Episode(2, _turns("u:task", "a:look", "u:out", "a:other"), "main"),
    Episode(3, _turns("u:task", "a:look+"), "main"),
    Episode(4, [], "main"),
    Episode(0, _turns("u:sub", "a:done"), "subagent-1"),
    Episode(5, _turns("u:summary", "a:look"), "main"),
]
# The longest turn lists, none a prefix of another: episodes 1, 2, 3, the subagent's, 5.
CONVERSATION_TURNS = 4 + 4 + 2 + 2 + 2


def _load(engine, episodes: list[Episode], unit: str) -> None:
    source_id = writer.ensure_source(engine, "traces", "/jobs/conv", "conv")
    trial = Trial(run_key=RUN, trial_name="conv__aaaaaaa", task_name="conv", agent="terminus-2", model=None,
                  model_provider=None, result="1.0", reward=1.0, date_raw=None, verifier_output=None,
                  instruction="task", source_run_id=None, episodes=episodes)
    with writer.unit(engine, source_id, unit, unit) as w:
        w.add_trials([trial])


def _stored(engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(text(
            "SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM conversation_turns), "
            "(SELECT count(*) FROM turns)")).one())


def _episode_turns(engine) -> dict[tuple[str, int], list[tuple]]:
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT e.trace_source, e.episode_index, t.idx, t.role, m.content, t.extra FROM turns t "
            "JOIN episodes e ON e.id = t.episode_id LEFT JOIN messages m ON m.id = t.message_id "
            "ORDER BY e.trace_source, e.episode_index, t.idx")).all()
    out: dict[tuple[str, int], list[tuple]] = {}
    for source, index, idx, role, content, extra in rows:
        extra = json.loads(extra) if isinstance(extra, str) else extra  # SQLite's JSON comes as text
        out.setdefault((source, index), []).append((idx, role, content, extra))
    return out


def test_each_conversation_is_stored_once_and_each_episode_reads_back_whole(engine):
    _load(engine, EPISODES, "all")
    assert _stored(engine) == (5, CONVERSATION_TURNS, sum(len(ep.turns) for ep in EPISODES))
    got = _episode_turns(engine)
    for ep in EPISODES:
        want = [(i, t.role, t.content, t.extra) for i, t in enumerate(ep.turns)]
        assert got.get((ep.trace_source, ep.episode_index), []) == want
    with engine.connect() as conn:
        lone = conn.execute(text("SELECT conversation_id FROM episodes WHERE n_turns = 0")).scalars().all()
    assert lone == [None]


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4, 5, 6), (6, 5, 4, 3, 2, 1, 0), (2, 0, 5, 1, 3, 6, 4)])
def test_the_conversations_do_not_depend_on_the_order_episodes_arrive_in(fresh, order):
    # Each episode a unit of its own, in each order: one extends a stored conversation, or is a
    # prefix of one, whichever came first; the warehouse is the one a load of all at once makes.
    at_once, one_by_one = fresh(), fresh()
    _load(at_once, EPISODES, "all")
    for n in order:
        _load(one_by_one, [EPISODES[n]], f"unit-{n}")
    assert _stored(one_by_one) == _stored(at_once)
    want, got = (_without_provenance(dump(e, order_independent=True)) for e in (at_once, one_by_one))
    assert differences(want, got) == []
    assert "conversations" in want


def _without_provenance(state: dict[str, list[str]]) -> dict[str, list[str]]:
    # The units differ (one per episode here): the ledger and the provenance only.
    return {table: rows for table, rows in state.items() if table not in (*PROVENANCE, "episode_loads")}


def test_the_migration_converts_a_warehouse_in_place_and_back(engine):
    # Downgraded to 0013, the warehouse holds every episode's turns as rows of the table
    # `turns`; upgraded again, the conversations the migration makes are those a fresh load
    # makes, and every episode reads back the same.
    _load(engine, EPISODES, "all")
    fresh = dump(engine)
    schema.downgrade(engine, "0013")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM turns")).scalar() == sum(len(ep.turns) for ep in EPISODES)
    schema.upgrade(engine)
    assert differences(fresh, dump(engine)) == []
    assert _stored(engine)[:2] == (5, CONVERSATION_TURNS)
    _load(engine, [Episode(6, _turns("u:task", "a:look", "u:out", "a:fix", "u:more"), "main")], "later")
    assert _stored(engine)[:2] == (5, CONVERSATION_TURNS + 1)  # extends the stored conversation
