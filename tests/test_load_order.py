"""Order never matters: the same sources, loaded in any order and split into ingest commands
any way, give the same warehouse (every table by natural key, every canned answer, every
export), provenance aside; on both backends.

The sources (order_sources.py) are trace directories and Harbor's exports of them in each
shape: all episodes, one step per shard, last episodes, a success-only subset and a
per-subagent dataset. The reference is the trace directory loaded first, then each export."""

from __future__ import annotations

import itertools
import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select, text

import canonical
from conftest import fresh_warehouse
from helpers import hub_row, write_shard
from ingest.pipeline import ingest
from order_sources import SUBAGENT, make_sources
from warehouse.db.models import conversation_turns, conversations, episodes
from warehouse.db.engine import make_engine, resolve_url
from warehouse.export import export_hub
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import LEDGER

# Provenance: which unit each row came from, what it counted, and what disagreed with what
# (a conflict names the load that brought the losing version). The rest must not depend on order.
PROVENANCE = ("sources", "loads", "trial_loads", "conflicts", "run_sources")
TRIES = int(os.environ.get("WAREHOUSE_TEST_ORDER_TRIES", "6"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    return make_sources(tmp_path_factory.mktemp("order-sources"))


@pytest.fixture
def fresh(backend, tmp_path, request):
    """A function giving a new empty warehouse (an engine at the head revision) at each call."""
    made, cleanups = [], []

    def new():
        folder = tmp_path / f"w{len(made)}"
        folder.mkdir()
        maker = fresh_warehouse(backend, folder, request)
        url = next(maker)
        cleanups.append(maker)
        engine = make_engine(resolve_url(url))
        made.append(engine)
        return engine

    yield new
    for engine in made:
        engine.dispose()
    for maker in cleanups:
        next(maker, None)


def _assert_conversations_stored_once(engine) -> None:
    """Each trial's conversations are the longest of its episodes' turn lists: every one ends
    where an episode of it ends, and none is a prefix of another (so however the trial's rows
    were taken up and placed again, nothing is stored twice or left over)."""
    with engine.connect() as conn:
        turns: dict[int, list[tuple]] = {}
        for cid, role, mid, extra in conn.execute(select(
                conversation_turns.c.conversation_id, conversation_turns.c.role, conversation_turns.c.message_id,
                conversation_turns.c.extra).order_by(conversation_turns.c.conversation_id, conversation_turns.c.idx)):
            turns.setdefault(cid, []).append((role, mid, json.dumps(extra, sort_keys=True)))
        longest = dict(conn.execute(select(episodes.c.conversation_id, func.max(episodes.c.n_turns))
                                    .where(episodes.c.conversation_id.is_not(None)).group_by(episodes.c.conversation_id)).all())
        trial_of = dict(conn.execute(select(conversations.c.id, conversations.c.trial_id)).all())
    assert {cid: len(t) for cid, t in turns.items()} == {cid: longest.get(cid) for cid in turns}
    assert set(trial_of) == set(turns)
    by_trial: dict[int, list[list[tuple]]] = {}
    for cid, trial in trial_of.items():
        by_trial.setdefault(trial, []).append(turns[cid])
    for held in by_trial.values():
        for a, b in itertools.permutations(held, 2):
            assert b[:len(a)] != a, "a conversation stored as a prefix of another"


def _state(engine, sources: dict[str, Path], out: Path) -> dict[str, list[str]]:
    """The canonical state: tables without provenance, every canned answer, every export."""
    _assert_conversations_stored_once(engine)
    dump = canonical.dump(engine, order_independent=True)
    state = {table: rows for table, rows in dump.items() if table not in PROVENANCE}
    for name, query in QUERIES.items():
        if name in LEDGER:  # the ledger is provenance
            continue
        result = run_canned(engine.url, query, _params(name))
        state[f"query {name}"] = [repr(row) for row in result.rows]
    out.mkdir()
    for name in [None, *sources]:
        target = out / (name or "everything")
        info = export_hub(engine, target, sources=None if name is None else [str(sources[name])])
        state[f"export {name}"] = [repr(row) for path in info.files for row in pq.read_table(path).to_pylist()]
    return state


def _params(name: str) -> dict:
    runs = {"a": "6a29732a-c34a-4f7e-85bd-ee65fb2d2604", "b": "0b1c2d3e-0000-4000-8000-0000000000f1"}
    return runs if name in ("compare", "compare-test") else {}


def _load(engine, sources: dict[str, Path], commands: list[list[str]]) -> None:
    for command in commands:
        summary = ingest(engine, [str(sources[name]) for name in command])
        assert summary.errors == [], summary.errors


def _orders(names: list[str]) -> list[list[list[str]]]:
    """Load orders of every source to try, each a list of ingest commands: the reverse of the
    reference, all in one command, and random permutations split at random points."""
    orders = [[[n] for n in reversed(names)]]
    orders.append([list(reversed(names))])
    rng = random.Random(25)
    for _ in range(TRIES):
        perm = rng.sample(names, len(names))
        cuts = sorted(rng.sample(range(1, len(perm)), rng.randint(0, len(perm) - 1)))
        orders.append([perm[a:b] for a, b in itertools.pairwise([0, *cuts, len(perm)])])
    return orders


def _assert_every_order_the_same(sources: dict[str, Path], fresh, tmp_path: Path) -> None:
    """Each source in its own command, in the given order, is the reference; every order of
    _orders gives its state."""
    names = list(sources)
    reference_engine = fresh()
    _load(reference_engine, sources, [[n] for n in names])
    reference = _state(reference_engine, sources, tmp_path / "reference")
    for i, commands in enumerate(_orders(names)):
        engine = fresh()
        _load(engine, sources, commands)
        got = _state(engine, sources, tmp_path / f"order-{i}")
        assert canonical.differences(reference, got) == [], f"loaded as {commands}"
        engine.dispose()


def test_every_load_order_gives_the_same_warehouse(sources, fresh, tmp_path):
    _assert_every_order_the_same(sources, fresh, tmp_path)


def test_every_order_of_datasets_alone_gives_the_same_warehouse(sources, fresh, tmp_path):
    """Without the trace directory: a multi-step trial's steps repeat their keys (kept as
    episodes of their own however the shards are split), a per-subagent dataset's rows are
    keyed main episode-0, two datasets disagree on a result."""
    _assert_every_order_the_same({n: p for n, p in sources.items() if n != "traces"}, fresh, tmp_path)


def test_a_trace_directory_after_its_export_is_stored_whole(sources, fresh, tmp_path):
    """Richer data wins: each export loaded before the trace directory gives what the trace
    directory loaded first gives: its turn extras (tool calls, metrics, step ids), observations,
    every step, its lengths, and the same answers and exports."""
    for hub in [n for n in sources if n != "traces"]:
        pair = {n: sources[n] for n in ("traces", hub)}
        first = fresh()
        _load(first, pair, [["traces"], [hub]])
        then = fresh()
        _load(then, pair, [[hub], ["traces"]])
        a, b = (_state(e, pair, tmp_path / f"{hub}-{i}") for i, e in enumerate((first, then)))
        assert canonical.differences(a, b) == [], f"{hub} before the trace directory"


def _episode_conflicts(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM conflicts WHERE entity = 'episode'")).scalar_one()


def test_one_step_per_shard_keeps_every_step_an_episode(sources, fresh):
    """A multi-step trial's export split one step per shard, read alone: each step's episodes
    are episodes (none left only in conflicts), as when the steps come in one shard."""
    split, whole = fresh(), fresh()
    _load(split, sources, [["steps"]])
    _load(whole, sources, [["all"]])
    a, b = (canonical.dump(e, order_independent=True) for e in (split, whole))
    for table in ("episodes", "turns", "trial_lengths"):
        assert a[table] == b[table], table
    assert _episode_conflicts(split) == 0


def test_a_per_subagent_dataset_before_its_trace_directory_leaves_no_conflict(sources, fresh):
    """The per-subagent dataset's row (main episode-0) first disagrees with nothing and then,
    once the merged export and the trace directory arrive, lands on the subagent's episode."""
    engine = fresh()
    _load(engine, sources, [[SUBAGENT], ["all"]])
    assert _episode_conflicts(engine) == 0
    _load(engine, sources, [["traces"]])
    assert _episode_conflicts(engine) == 0
    with engine.connect() as conn:
        landed = conn.execute(text("""
            SELECT e.trace_source, e.episode_index FROM episode_loads el
            JOIN episodes e ON e.id = el.episode_id JOIN loads l ON l.id = el.load_id
            JOIN sources s ON s.id = l.source_id WHERE s.uri = :uri"""), {"uri": str(sources[SUBAGENT])}).all()
    assert [tuple(r) for r in landed] == [(SUBAGENT, 0)]


def _step_rows(step: str, n: int) -> list[dict]:
    """A step's rows as Harbor exports them: episode k holds the conversation up to its k-th
    agent turn (each a prefix of the next)."""
    conversation = [("user", f"{step}: do it")]
    rows = []
    for k in range(n):
        conversation = [*conversation, ("assistant", f"{step} answer {k}")]
        rows.append(hub_row("chain__abcdefg", k, conversation))
        conversation = [*conversation, ("user", f"{step} observation {k}")]
    return rows


def test_a_longer_later_step_read_alone_stays_one_conversation(fresh, tmp_path):
    """A multi-step trial's export read alone, its second step longer than its first: each step
    is one conversation (its episodes extend one another), whichever shard comes first, so the
    trial's length is the sum of its steps' last episodes."""
    first, second = _step_rows("one", 2), _step_rows("two", 4)
    write_shard(tmp_path / "a" / "data" / "train-00000.parquet", first)
    write_shard(tmp_path / "a" / "data" / "train-00001.parquet", second)
    write_shard(tmp_path / "b" / "data" / "train-00000.parquet", second)
    write_shard(tmp_path / "b" / "data" / "train-00001.parquet", first)
    dumps = []
    for name in ("a", "b"):
        engine = fresh()
        assert ingest(engine, [str(tmp_path / name)]).errors == []
        with engine.connect() as conn:
            got = conn.execute(text("""
                SELECT e.trace_source, e.episode_index, e.n_turns, m.content FROM episodes e
                JOIN turns t ON t.episode_id = e.id AND t.idx = 0 JOIN messages m ON m.id = t.message_id
                ORDER BY e.trace_source, e.episode_index""")).all()
            length = conn.execute(text("SELECT turns FROM trial_lengths")).scalar_one()
        steps = {source: [(n, text_) for s, _, n, text_ in got if s == source] for source, _, _, _ in got}
        assert sorted(steps.values()) == [[(2, "one: do it"), (4, "one: do it")],
                                          [(2, "two: do it"), (4, "two: do it"), (6, "two: do it"), (8, "two: do it")]]
        assert length == 4 + 8
        dumps.append({t: rows for t, rows in canonical.dump(engine, order_independent=True).items()
                      if t in ("episodes", "turns", "trial_lengths")})
    # The same conversations under the same keys, whichever step's shard is first by name.
    assert dumps[0]["trial_lengths"] == dumps[1]["trial_lengths"]


def test_a_jsonl_of_a_datasets_rows_gives_what_its_parquet_gives(sources, fresh, tmp_path):
    """The same rows as JSON Lines (in a dataset folder of the same name) store what the Parquet
    stores, provenance aside, alone or with it in either order; each source's export is its own
    rows whichever came first."""
    shard = next((sources["all"] / "data").glob("*.parquet"))
    jsonl = tmp_path / "as-jsonl" / "all" / "data" / shard.with_suffix(".jsonl").name
    jsonl.parent.mkdir(parents=True)
    jsonl.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in pq.read_table(shard).to_pylist()),
                     encoding="utf-8")
    pair = {"parquet": sources["all"], "jsonl": jsonl.parent.parent}
    alone = []
    for name in pair:
        engine = fresh()
        _load(engine, pair, [[name]])
        alone.append({t: rows for t, rows in canonical.dump(engine, order_independent=True).items()
                      if t not in (*PROVENANCE, "episode_loads")})  # (which unit each row came from)
    assert canonical.differences(*alone) == []
    first, then = fresh(), fresh()
    _load(first, pair, [["parquet"], ["jsonl"]])
    _load(then, pair, [["jsonl"], ["parquet"]])
    a, b = (_state(e, pair, tmp_path / f"both-{i}") for i, e in enumerate((first, then)))
    assert canonical.differences(a, b) == []
    assert a["export jsonl"] == a["export parquet"]
