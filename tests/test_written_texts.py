"""A load into a warehouse without texts looks up, unit after unit, only the texts it may have
written already (ingest.write.written_texts): the filter never leaves a written text out, lets
few others through, and is trusted only while no other writer has written. Both backends."""

from __future__ import annotations

import os

from helpers import counts, hub_row, write_shard
from ingest.pipeline import ingest
from ingest.write import bulk, written_texts
from warehouse.db.engine import make_engine

SYSTEM = "You are a helpful agent."


def _random_hashes(n: int) -> list[bytes]:
    return [os.urandom(32) for _ in range(n)]


def test_the_filter_never_leaves_out_a_text_it_was_given_and_lets_few_others_through():
    texts = written_texts.WrittenTexts()
    given: list[bytes] = []
    for size in (1, 10, 1_000, 30_000, 70_000, 100_000):  # it grows past its first table twice
        batch = _random_hashes(size)
        texts.add(batch)
        given += batch
        assert texts.may_hold(given) == given
    assert len(texts) == len(given)
    others = _random_hashes(100_000)
    through = len(texts.may_hold(others)) / len(others)
    assert through < 1 - 0.88  # eight slots a text at the fullest: e^(-1/8) of them clear


def test_past_its_bound_the_filter_holds_nothing_and_lets_every_text_through(monkeypatch):
    monkeypatch.setattr(written_texts, "MAX_TEXTS", 100)
    texts = written_texts.WrittenTexts()
    texts.add(_random_hashes(60))
    assert not texts.full
    texts.add(_random_hashes(60))
    others = _random_hashes(50)
    assert texts.full and texts.may_hold(others) == others


def _shard(root, name: str, trials: range, *shared: str):
    """A dataset of one shard: each trial one episode of the system prompt, the `shared` texts
    and a text of its own."""
    rows = [hub_row(f"task{i}__t{i}", 0, [("system", SYSTEM), *(("user", s) for s in shared),
                                          ("assistant", f"answer of trial {i}")]) for i in trials]
    write_shard(root / name / "data" / "train-00000-of-00001.parquet", rows)
    return str(root / name)


def _texts_looked_up(monkeypatch) -> list[set[str]]:
    """The message texts each lookup asked for (by hash: turned back into texts by the caller)."""
    asked: list[set[bytes]] = []
    real = bulk.Bulk.lookup

    def lookup(self, table, key_cols, keys, value_cols, **kw):
        keys = list(keys)
        if table.name == "messages":
            asked.append({k[0] for k in keys})
        return real(self, table, key_cols, keys, value_cols, **kw)

    monkeypatch.setattr(bulk.Bulk, "lookup", lookup)
    return asked


def _hash_of(text: str) -> bytes:
    from ingest.shape.prepare import message_hash

    return message_hash(text)


def test_a_load_into_a_warehouse_without_texts_looks_up_only_those_it_wrote(engine, tmp_path, monkeypatch):
    asked = _texts_looked_up(monkeypatch)
    first = _shard(tmp_path, "a", range(0, 20), "first question")
    second = _shard(tmp_path, "b", range(20, 40), "first question", "second question")
    summary = ingest(engine, [first, second])
    assert summary.errors == [] and summary.units_loaded == 2
    looked_up = set().union(*asked)
    # The second unit asks for the texts the first stored, and for few of its 21 new ones.
    stored_before = {_hash_of(t) for t in (SYSTEM, "first question")}
    new = {_hash_of(t) for t in ["second question", *(f"answer of trial {i}" for i in range(20, 40))]}
    assert stored_before <= looked_up
    assert len(looked_up & new) <= 5
    assert counts(engine)["messages"] == 2 + 1 + 40


def test_a_load_without_the_filter_stores_the_same_rows(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(written_texts, "MAX_TEXTS", 0)  # full at once: every text looked up
    asked = _texts_looked_up(monkeypatch)
    first = _shard(tmp_path, "a", range(0, 20), "first question")
    second = _shard(tmp_path, "b", range(20, 40), "first question", "second question")
    assert ingest(engine, [first, second]).errors == []
    assert len(set().union(*asked)) == 3 + 20  # the second unit's every text
    assert counts(engine)["messages"] == 2 + 1 + 40


def test_another_writer_between_two_units_turns_the_filter_off(engine, tmp_path):
    """Without the check the third unit would take the other writer's text for a new one and
    fail on the unique index (or, without the index, store it twice)."""
    other = make_engine(engine.url)
    try:
        assert ingest(engine, [_shard(tmp_path, "a", range(0, 10))]).errors == []
        assert engine in written_texts._FILTERS
        assert ingest(other, [_shard(tmp_path, "b", range(10, 20), "the other writer's text")]).errors == []
        third = ingest(engine, [_shard(tmp_path, "c", range(20, 30), "the other writer's text")])
    finally:
        other.dispose()
    assert third.errors == [] and third.units_loaded == 1
    assert engine not in written_texts._FILTERS
    assert counts(engine)["messages"] == 1 + 30 + 1


def test_a_failed_unit_leaves_the_filter_trustworthy(engine, tmp_path, monkeypatch):
    """The failed unit's texts are in the filter but not stored: looked up, not found, written."""
    from ingest.read import hub

    monkeypatch.setattr(hub, "BATCH_ROWS", 4)  # the bad row's batch comes after others were written
    assert ingest(engine, [_shard(tmp_path, "a", range(0, 10), "kept")]).errors == []
    rows = [hub_row(f"task{i}__t{i}", 0, [("system", SYSTEM), ("user", "rolled back")]) for i in range(10, 20)]
    rows.append(hub_row("bad__t", 0, [("user", "x")], conversations=None))  # a bad row fails its unit
    write_shard(tmp_path / "bad" / "data" / "train-00000-of-00001.parquet", rows)
    failed = ingest(engine, [str(tmp_path / "bad")])
    assert failed.units_failed == 1
    third = ingest(engine, [_shard(tmp_path, "c", range(20, 30), "kept", "rolled back")])
    assert third.errors == [] and third.units_loaded == 1
    assert counts(engine)["messages"] == 1 + 1 + 10 + 1 + 10


def test_each_unit_of_a_first_load_keeps_the_filter_for_the_next(engine, tmp_path):
    n = 3
    sources = [_shard(tmp_path, f"s{k}", range(10 * k, 10 * k + 10), "shared") for k in range(n)]
    assert ingest(engine, sources).units_loaded == n
    texts, _ = written_texts._FILTERS[engine]
    assert len(texts) == 1 + 1 + 10 * n  # each text added once, by the unit that wrote it
