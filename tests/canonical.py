"""A canonical dump of a warehouse: every table's rows with surrogate ids replaced by natural
keys, sorted, so two databases can be compared for "same contents" whatever order their rows
were written in and whatever ids they got.

Natural keys: a source is (kind, uri); a load is (its source, unit, content_hash); a run is run_key;
a task is its name; a trial is (run_key, trial_name); an episode is (trial, trace_source,
episode_index); a message is its content hash. Left out: ids, created_at of every table, and
the started_at / finished_at of `loads` (when the unit happened to be written) and the schema
revision its detail records (which code wrote it: a warehouse upgraded in place keeps its loads'
older revisions, or none). The summary
tables are dumped too, by the same keys, so they are held to the same standard.

With `order_independent=True` the per-load counters that depend on which of several units
carrying the same rows committed first (new vs duplicate episodes, turns and message bytes
written) are left out as well: concurrent ingests of overlapping datasets may commit their
units in any order, and only the resulting rows must not depend on it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from sqlalchemy import Engine, select

from warehouse.db import integrity, models

def _load_detail(detail: Any) -> Any:
    """A load's detail without the schema revision that wrote it (None once nothing else is left,
    as loads before that revision was recorded wrote)."""
    if isinstance(detail, str):
        detail = json.loads(detail)
    if not isinstance(detail, dict):
        return detail
    rest = {k: v for k, v in detail.items() if k != "schema_revision"}
    return rest or None


ORDER_DEPENDENT_LOAD_COLUMNS = ("n_episodes_new", "n_episodes_duplicate", "n_turns", "n_bytes", "n_conflicts")
LOAD_TIMES = ("started_at", "finished_at")


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return {"$hex": bytes(value).hex()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _line(row: dict[str, Any]) -> str:
    # ensure_ascii keeps lone surrogates printable; sort_keys makes dicts canonical.
    return json.dumps(_plain(row), sort_keys=True, ensure_ascii=True)


def _rows(conn, table) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(select(table))]


def _drop(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in set(names)}


def dump(engine: Engine, *, order_independent: bool = False) -> dict[str, list[str]]:
    """{table: sorted rows as canonical JSON lines}."""
    with engine.connect() as conn:
        # The ingest writer keeps references itself (no per-row checks on either backend):
        # every dump checks them, as `warehouse db check` does.
        dangling = integrity.broken_references(conn)
        assert dangling == [], f"rows referring to rows that do not exist: {dangling}"
        sources = _rows(conn, models.sources)
        loads = _rows(conn, models.loads)
        runs = _rows(conn, models.runs)
        tasks = _rows(conn, models.tasks)
        trials = _rows(conn, models.trials)
        episodes = _rows(conn, models.episodes)
        turns = _rows(conn, models.turns)  # the view: each episode's turns
        conversations = _rows(conn, models.conversations)
        conversation_turns = _rows(conn, models.conversation_turns)
        messages = _rows(conn, models.messages)
        episode_loads = _rows(conn, models.episode_loads)
        trial_loads = _rows(conn, models.trial_loads)
        conflicts = _rows(conn, models.conflicts)
        lengths = _rows(conn, models.trial_lengths)
        breakdown = _rows(conn, models.run_task_breakdown)
        outcomes = _rows(conn, models.run_task_outcomes)
        run_sources = _rows(conn, models.run_sources)

    source_key = {s["id"]: [s["kind"], s["uri"]] for s in sources}
    load_key = {ld["id"]: [source_key[ld["source_id"]], ld["unit"], ld["content_hash"]] for ld in loads}
    run_key = {r["id"]: r["run_key"] for r in runs}
    task_key = {t["id"]: t["name"] for t in tasks}
    message_key = {m["id"]: bytes(m["content_hash"]).hex() for m in messages}
    trial_key = {t["id"]: [run_key[t["run_id"]], t["trial_name"]] for t in trials}
    episode_key = {e["id"]: [trial_key[e["trial_id"]], e["trace_source"], e["episode_index"]] for e in episodes}

    out: dict[str, list[dict[str, Any]]] = {}
    out["sources"] = [_drop(s, ["id", "created_at"]) for s in sources]
    skip = ["id", "source_id", *LOAD_TIMES, *(ORDER_DEPENDENT_LOAD_COLUMNS if order_independent else ())]
    out["loads"] = [dict(_drop(ld, skip), source=source_key[ld["source_id"]], detail=_load_detail(ld["detail"]))
                    for ld in loads]
    # A run two datasets hold is named for the one loaded first (warehouse.runs): in a race, the
    # winner's name, which a sequential load cannot predict.
    out["runs"] = [_drop(r, ["id", "created_at", *(["name"] if order_independent else [])]) for r in runs]
    out["tasks"] = [_drop(t, ["id", "created_at"]) for t in tasks]
    out["trials"] = [dict(_drop(t, ["id", "run_id", "task_id", "instruction_id", "created_at"]),
                          run=run_key[t["run_id"]],
                          task=task_key.get(t["task_id"]),
                          instruction=message_key.get(t["instruction_id"]))
                     for t in trials]
    out["episodes"] = [dict(_drop(e, ["id", "trial_id", "created_at", "conversation_id"]), trial=trial_key[e["trial_id"]])
                       for e in episodes]
    out["turns"] = [dict(_drop(t, ["episode_id", "message_id"]), episode=episode_key[t["episode_id"]],
                         message=message_key.get(t["message_id"])) for t in turns]
    # A conversation is its trial and its turns: which stored conversation an episode points at
    # is an id, but the set of conversations is the episodes' longest turn lists.
    conversation_of = {c["id"]: {"trial": trial_key[c["trial_id"]], "turns": []} for c in conversations}
    for t in sorted(conversation_turns, key=lambda t: (t["conversation_id"], t["idx"])):
        conversation_of[t["conversation_id"]]["turns"].append(
            [t["idx"], t["role"], message_key.get(t["message_id"]), t["extra"]])
    out["conversations"] = list(conversation_of.values())
    out["messages"] = [dict(_drop(m, ["id", "content_hash"]), hash=bytes(m["content_hash"]).hex())
                       for m in messages]
    out["episode_loads"] = [{"load": load_key[el["load_id"]], "row_number": el["row_number"],
                             "episode": episode_key[el["episode_id"]], "extra": el["extra"]} for el in episode_loads]
    out["trial_loads"] = [{"load": load_key[tl["load_id"]], "trial": trial_key[tl["trial_id"]]}
                          for tl in trial_loads]
    out["conflicts"] = [_conflict(c, load_key, trial_key, episode_key, message_key) for c in conflicts]
    out["trial_lengths"] = [dict(_drop(tl, ["trial_id", "run_id"]), trial=trial_key[tl["trial_id"]])
                            for tl in lengths]
    for name, rows in (("run_task_breakdown", breakdown), ("run_task_outcomes", outcomes)):
        out[name] = [dict(_drop(o, ["id", "run_id", "task_id"]), run=run_key[o["run_id"]],
                          task=task_key.get(o["task_id"])) for o in rows]
    out["run_sources"] = [{"run": run_key[rs["run_id"]], "source": source_key[rs["source_id"]]}
                          for rs in run_sources]
    return {table: sorted(_line(r) for r in rows) for table, rows in out.items()}


def _conflict(c, load_key, trial_key, episode_key, message_key) -> dict[str, Any]:
    entity_keys = {"trial": trial_key, "episode": episode_key}[c["entity"]]
    row = dict(_drop(c, ["id", "load_id", "entity_id", "created_at"]), load=load_key[c["load_id"]],
               entity_key=entity_keys[c["entity_id"]])
    if c["field"] == "instruction_id":  # the values are message ids: compare their texts' hashes
        for side in ("kept", "incoming"):
            value = (row[side] or {}).get("instruction_id")
            row[side] = {"instruction": message_key.get(value)}
    if c["field"] == "conversation":  # the row's turns name message ids too
        row["incoming"] = dict(row["incoming"], turns=[[role, message_key.get(message_id), extra]
                                                       for role, message_id, extra in row["incoming"]["turns"]])
    return row


def differences(a: dict[str, list[str]], b: dict[str, list[str]], limit: int = 5) -> list[str]:
    """Human-readable differences between two dumps (empty when equal)."""
    out = []
    for table in sorted(set(a) | set(b)):
        only_a = sorted(set(a.get(table, [])) - set(b.get(table, [])))
        only_b = sorted(set(b.get(table, [])) - set(a.get(table, [])))
        if len(a.get(table, [])) != len(b.get(table, [])) or only_a or only_b:
            out.append(f"{table}: {len(a.get(table, []))} vs {len(b.get(table, []))} rows; "
                       f"only in first: {only_a[:limit]}; only in second: {only_b[:limit]}")
    return out
