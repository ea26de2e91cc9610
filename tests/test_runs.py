"""Runs as people name them (a key, a unique prefix, a name), labels, and the one filter
predicate every query shares: on both backends, over a warehouse loaded by the real writer."""

from __future__ import annotations

import pytest
from sqlalchemy import text

import query_fixture
from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.runs import (label_sort_key, labels_of, parse_label, parse_labels, remove_labels,
                            resolve_run, resolve_runs, runs_with_labels, set_labels)


@pytest.fixture
def wh(engine):
    query_fixture.build(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'alpha' WHERE run_key = 'run-a'"))
        conn.execute(text("UPDATE runs SET name = 'beta' WHERE run_key = 'run-b'"))
        conn.execute(text("UPDATE runs SET name = 'beta' WHERE run_key = 'run-c'"))  # a shared name
    return engine


def test_a_run_is_found_by_key_name_or_unique_prefix(wh):
    with wh.connect() as conn:
        assert resolve_run(conn, "run-a").run_key == "run-a"
        assert resolve_run(conn, "alpha").run_key == "run-a"
        assert resolve_run(conn, "run-b").name == "beta"
        with pytest.raises(WarehouseError, match=r"^run 'run-' is ambiguous: it could be run-a \(alpha\), run-b \(beta\), run-c \(beta\)$"):
            resolve_run(conn, "run-")
        with pytest.raises(WarehouseError, match=r"^run 'beta' is ambiguous"):
            resolve_run(conn, "beta")
        with pytest.raises(WarehouseError, match=r"^no run 'nope' \(`warehouse runs` lists them\)$"):
            resolve_run(conn, "nope")
        with pytest.raises(WarehouseError, match="no run 'RUN-A'"):  # case-sensitive
            resolve_run(conn, "RUN-A")
        with pytest.raises(WarehouseError, match="no run 'r%'"):  # no wildcards
            resolve_run(conn, "r%")
        assert [r.run_key for r in resolve_runs(conn, ["run-b", "alpha", "run-a"])] == ["run-b", "run-a"]


def test_labels_are_set_replaced_listed_and_matched(wh):
    with wh.begin() as conn:
        a, b = resolve_run(conn, "run-a").id, resolve_run(conn, "run-b").id
        set_labels(conn, a, {"step": "10", "lr": "3e-5"})
        set_labels(conn, b, {"step": "2"})
        set_labels(conn, b, {"step": "20", "note": "x=y"})
    with wh.connect() as conn:
        assert labels_of(conn) == {a: {"lr": "3e-5", "step": "10"}, b: {"note": "x=y", "step": "20"}}
        assert labels_of(conn, [b]) == {b: {"note": "x=y", "step": "20"}}
        assert labels_of(conn, []) == {}
        assert runs_with_labels(conn, [("step", "20")]) == {b}
        assert runs_with_labels(conn, [("step", "10"), ("lr", "3e-5")]) == {a}
        assert runs_with_labels(conn, [("step", "10"), ("note", "x=y")]) == set()
    with wh.begin() as conn:
        remove_labels(conn, b, ["note"])
    with wh.connect() as conn:
        assert labels_of(conn, [b]) == {b: {"step": "20"}}


def test_label_text_and_order():
    assert parse_label("note=a=b") == ("note", "a=b")
    assert parse_label("empty=") == ("empty", "")
    assert parse_labels(["step=1", "step=2"]) == {"step": "2"}
    for bad in ("step", "=1", ""):
        with pytest.raises(WarehouseError, match="a label is key=value"):
            parse_label(bad)
    values = ["10", "b", None, "2", "a", "1e1", "nan"]
    assert sorted(values, key=label_sort_key) == ["2", "10", "1e1", "a", "b", "nan", None]


def _trials(conn, filters: Filters) -> list[tuple[str, str]]:
    predicate, binds = filters.sql(conn, run_id="r.id", task="ta.name", model="t.model", agent="t.agent")
    return [tuple(row) for row in conn.execute(text(
        "SELECT r.run_key, t.trial_name FROM trials t JOIN runs r ON r.id = t.run_id "
        f"LEFT JOIN tasks ta ON ta.id = t.task_id WHERE {predicate} ORDER BY 1, 2"), binds)]


def test_filters_narrow_by_run_task_model_agent_and_label(wh):
    with wh.begin() as conn:
        set_labels(conn, resolve_run(conn, "run-b").id, {"step": "2"})
    with wh.connect() as conn:
        everything = _trials(conn, Filters())
        assert len(everything) == 22  # 11 + 9 + 2
        assert {run for run, _ in _trials(conn, Filters.of(run="alpha"))} == {"run-a"}
        assert {run for run, _ in _trials(conn, Filters.of(run=["run-a", "run-c"]))} == {"run-a", "run-c"}
        assert {run for run, _ in _trials(conn, Filters.of(label="step=2"))} == {"run-b"}
        assert _trials(conn, Filters.of(run="run-a", label="step=2")) == []
        assert _trials(conn, Filters.of(label={"step": "3"})) == []
        tasks = {name for _, name in _trials(conn, Filters.of(task="task3"))}
        assert len(tasks) == 4
        assert _trials(conn, Filters.of(task="TASK*")) == _trials(conn, Filters.of(task=["task?"]))
        assert _trials(conn, Filters.of(task="TASK3")) == []  # no wildcard: exact
        assert _trials(conn, Filters.of(task="task_")) == []  # `_` is a character, not a wildcard
        assert {run for run, _ in _trials(conn, Filters.of(agent="openhands"))} == {"run-c"}
        m2 = _trials(conn, Filters.of(model="m2"))
        assert m2 and {run for run, _ in m2} == {"run-b"}
        with pytest.raises(WarehouseError, match="no run 'zzz'"):
            Filters.of(run="zzz").sql(conn, run_id="r.id")
        with pytest.raises(WarehouseError, match="cannot be narrowed by --model"):
            Filters.of(model="m1").sql(conn, run_id="r.id")
    assert not Filters() and Filters.of(task="x")
    assert Filters().sql(None) == ("1=1", {})
