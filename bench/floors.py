"""The baselines the warehouse is measured against, each run in its own process:

- the bare floors: the same normalized rows the warehouse writes, inserted with plain
  `sqlite3.executemany` or psycopg `COPY` (no dedup lookups, no ledger, no conflict checks);
  rows are built before the clock starts, so a floor is pure database write time;
- what a user would do without us: pandas.read_parquet, explode the conversations, to_sql;
- the bound of the ingest's own design on SQLite: its reader process sends the floor's rows,
  ready to insert, and its writer only executes them, refreshes the summaries and commits.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path

from ingest.read import hub
from ingest.shape.prepare import conversation_hash, message_hash
from warehouse.texts import split_text


@dataclass
class NormalizedRows:
    runs: list[tuple] = field(default_factory=list)
    tasks: list[tuple] = field(default_factory=list)
    trials: list[tuple] = field(default_factory=list)
    episodes: list[tuple] = field(default_factory=list)
    conversations: list[tuple] = field(default_factory=list)
    conversation_turns: list[tuple] = field(default_factory=list)
    messages: list[tuple] = field(default_factory=list)

    COLUMNS = {
        "runs": ("id", "run_key"),
        "tasks": ("id", "name"),
        "trials": ("id", "run_id", "task_id", "trial_name", "status", "agent", "model", "model_provider",
                   "result", "reward", "exception_type", "started_at", "date_raw", "verifier_output",
                   "instruction_id", "source_run_id"),
        "episodes": ("id", "trial_id", "trace_source", "episode_index", "n_turns", "n_chars", "conversation_hash",
                     "conversation_id"),
        "conversations": ("id", "trial_id"),
        "conversation_turns": ("conversation_id", "idx", "role", "message_id"),
        "messages": ("id", "content_hash", "content", "content_raw", "n_chars"),
    }

    def tables(self):
        # Parents first, as foreign keys require.
        for name in ("runs", "tasks", "messages", "trials", "conversations", "episodes", "conversation_turns"):
            yield name, self.COLUMNS[name], getattr(self, name)


def normalize(shards: list[Path], dataset_name: str) -> NormalizedRows:
    """The rows the warehouse stores for these shards, built the simplest way."""
    out = NormalizedRows()
    ids: dict[str, dict] = {"runs": {}, "tasks": {}, "messages": {}, "trials": {}, "episodes": {}}
    conversations: dict[int, list[tuple[int, list]]] = {}  # per trial: (id, turns) of each stored one

    def id_of(kind: str, key, make) -> int:
        table = ids[kind]
        if key not in table:
            table[key] = len(table) + 1
            getattr(out, kind).append(make(table[key]))
        return table[key]

    for shard in shards:
        pf, _ = hub.open_shard(shard)
        for trials, _rejected, _ in hub.read_rows(pf, shard, dataset_name, None):
            for t in trials:
                run_id = id_of("runs", t.run_key, lambda i: (i, t.run_key))
                task_id = id_of("tasks", t.task_name, lambda i: (i, t.task_name))

                def message(text: str) -> int:
                    return id_of("messages", message_hash(text), lambda i: (
                        i, message_hash(text), *split_text(text), len(text)))

                instruction_id = message(t.instruction) if t.instruction is not None else None
                trial_id = id_of("trials", (run_id, t.trial_name), lambda i: (
                    i, run_id, task_id, t.trial_name, t.status, t.agent, t.model, t.model_provider, t.result,
                    t.reward, t.exception_type, _stored_timestamp(t.started_at), t.date_raw, t.verifier_output,
                    instruction_id, t.source_run_id))
                for ep in t.episodes:
                    key = (trial_id, ep.trace_source, ep.episode_index)
                    if key in ids["episodes"]:
                        continue
                    n_chars = sum(len(x.content) for x in ep.turns if x.content is not None)
                    turns = [(turn.role, message(turn.content) if turn.content is not None else None)
                             for turn in ep.turns]
                    conversation_id = _conversation(out, conversations.setdefault(trial_id, []), trial_id, turns)
                    id_of("episodes", key, lambda i: (
                        i, trial_id, ep.trace_source, ep.episode_index, len(ep.turns), n_chars,
                        conversation_hash(ep), conversation_id))
    return out


def _conversation(out: NormalizedRows, stored: list[tuple[int, list]], trial_id: int, turns: list) -> int | None:
    """The conversation of the trial an episode of these turns is a prefix of, stored or extended
    as the warehouse does (ingest.write.conversations), the simplest way."""
    if not turns:
        return None
    for conversation_id, held in stored:
        if held[:len(turns)] == turns:
            return conversation_id
        if turns[:len(held)] == held:
            out.conversation_turns += [(conversation_id, idx, *turns[idx]) for idx in range(len(held), len(turns))]
            held += turns[len(held):]
            return conversation_id
    conversation_id = len(out.conversations) + 1
    out.conversations.append((conversation_id, trial_id))
    out.conversation_turns += [(conversation_id, idx, *turn) for idx, turn in enumerate(turns)]
    stored.append((conversation_id, list(turns)))
    return conversation_id


def _stored_timestamp(value):
    # The text the warehouse stores on SQLite (UTC, no offset); COPY parses the same text.
    return None if value is None else value.astimezone(timezone.utc).replace(tzinfo=None).isoformat(sep=" ")


def _insert_sql(table: str, cols: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def sqlite_floor(rows: NormalizedRows, db_path: Path) -> None:
    """executemany of every table into a warehouse-schema SQLite file, one transaction."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN")
    for name, cols, data in rows.tables():
        conn.executemany(_insert_sql(name, cols), data)
    conn.execute("COMMIT")
    conn.close()


# The rows the bound's reader process sends; it is forked at its first job and inherits them.
_BOUND_TABLES: list[tuple[str, tuple, list]] = []


def _bound_batches(n_batches: int):
    for i in range(n_batches):
        yield [(name, cols, data[i * len(data) // n_batches:(i + 1) * len(data) // n_batches])
               for name, cols, data in _BOUND_TABLES]


def sqlite_writer_bound(rows: NormalizedRows, engine) -> float:
    """Seconds for the ingest's two-process design with the writer's work cut to the bone: the
    reader process sends the floor's rows (ids assigned) and the provenance rows, in batches as
    the ingest's are; the writer runs executemany, the summary refresh, the ledger update and
    the commit, in one transaction as a unit does. The least this design can cost."""
    from sqlalchemy import text

    from ingest.process.worker import Reader
    from ingest.write.writer import ensure_source
    from warehouse import summaries
    from warehouse.db.session import write_transaction

    _BOUND_TABLES[:] = [*rows.tables(),
                        ("episode_loads", ("load_id", "row_number", "episode_id"),
                         [(1, i, episode[0]) for i, episode in enumerate(rows.episodes)]),
                        ("trial_loads", ("trial_id", "load_id"), [(trial[0], 1) for trial in rows.trials])]
    n_batches = max(1, len(rows.episodes) // hub.BATCH_ROWS)  # as many batches as the ingest's
    source_id = ensure_source(engine, "parquet", "bound", "bound")
    started = time.perf_counter()
    with Reader() as reader, write_transaction(engine, check_references=False) as conn:
        conn.execute(text(
            "INSERT INTO loads (id, source_id, unit, content_hash, status, started_at, finished_at, tool_version, "
            "n_rows, n_trials, n_episodes_new, n_episodes_duplicate, n_conflicts, n_rejected, n_turns, n_bytes) "
            "VALUES (1, :source, 'bound', 'bound', 'loading', '2026-01-01', '2026-01-01', '-', "
            "0, 0, 0, 0, 0, 0, 0, 0)"), {"source": source_id})
        cur = conn.connection.driver_connection.cursor()
        for batch in reader.run(_bound_batches, n_batches):
            for name, cols, data in batch:
                cur.executemany(_insert_sql(name, cols), data)
        summaries.refresh(conn, 1, [trial[0] for trial in rows.trials], [run[0] for run in rows.runs])
        conn.execute(text("UPDATE loads SET status = 'loaded', n_rows = :n WHERE id = 1"), {"n": len(rows.episodes)})
    engine.dispose()
    return time.perf_counter() - started


def postgres_floor(rows: NormalizedRows, conninfo: str) -> None:
    """COPY of every table into a warehouse-schema PostgreSQL database, one transaction."""
    import psycopg

    with psycopg.connect(conninfo) as conn:
        with conn.cursor() as cur:
            for name, cols, data in rows.tables():
                with cur.copy(f"COPY {name} ({', '.join(cols)}) FROM STDIN") as copy:
                    for row in data:
                        copy.write_row(row)


def pandas_path(shards: list[Path], db_path: Path) -> None:
    """What a user would do without the warehouse: one flat table of messages via pandas."""
    from bench.least_floor import pandas_into

    conn = sqlite3.connect(db_path)
    pandas_into(shards, conn)
    conn.commit()
    conn.close()


def distinct_text_bytes(rows: NormalizedRows) -> int:
    """UTF-8 bytes of the distinct message texts plus the trials' verifier outputs."""
    total = sum(len(raw) if raw is not None else len(text.encode()) for _, _, text, raw, _ in rows.messages)
    seen: set[bytes] = set()
    for trial in rows.trials:
        if trial[13] is not None:
            data = trial[13].encode("utf-8", "surrogatepass")
            digest = hashlib.sha256(data).digest()
            if digest not in seen:
                seen.add(digest)
                total += len(data)
    return total


def whole_process(write, target) -> None:
    """The body of a whole-process floor (bench.floor_sqlite, bench.floor_postgres): the dataset
    in sys.argv[1] read and normalized, then written by `write(rows, target)`."""
    import sys

    started = time.perf_counter()
    rows = normalize(sorted((Path(sys.argv[1]) / "data").glob("*.parquet")), Path(sys.argv[1]).name)
    normalized = time.perf_counter()
    write(rows, target)
    # Where the time goes, reading against writing (the benchmark times the whole process).
    print(f"read and normalized in {normalized - started:.2f} s, written in "
          f"{time.perf_counter() - normalized:.2f} s", file=sys.stderr)
