"""Small builders shared by the tests: Hub-shaped shards and table counts."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine, text

CONVERSATIONS = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
STRING_COLUMNS = ("agent", "model", "model_provider", "date", "task", "episode", "run_id", "trial_name",
                  "result", "verifier_output")
TABLES = ("runs", "tasks", "trials", "episodes", "conversations", "conversation_turns", "messages", "episode_loads", "trial_loads",
          "loads", "conflicts", "sources", "run_labels",
          "run_task_breakdown", "run_task_outcomes", "trial_lengths", "run_sources")  # the summaries


def hub_row(trial: str, episode_index: int, conversation: list[tuple[str, str]], **fields: Any) -> dict[str, Any]:
    row = dict(
        conversations=[{"role": r, "content": c} for r, c in conversation],
        agent="terminus-2", model="openai/gpt-4o", model_provider="openai",
        date="2026-05-27T13:46:14.647436Z", task=trial.split("__")[0], episode=f"episode-{episode_index}",
        run_id="6a29732a-0000-4000-8000-000000000001", trial_name=trial, result="1.0",
        verifier_output="1 passed",
    )
    row.update(fields)
    return row


def write_shard(path: Path, rows: list[dict[str, Any]], extra_fields: list[pa.Field] = ()) -> Path:
    """Write rows as Harbor's exporter would: the standard columns as strings plus any extras."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(k for row in rows for k in row)) if rows else ["conversations", "trial_name", "episode"]
    explicit = {f.name: f for f in extra_fields}
    fields = []
    for name in names:
        if name in explicit:
            fields.append(explicit[name])
        elif name == "conversations":
            fields.append(pa.field(name, CONVERSATIONS))
        else:
            fields.append(pa.field(name, pa.string()))
    table = pa.Table.from_pylist(rows, schema=pa.schema(fields))
    pq.write_table(table, path)
    return path


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        # And the view `turns`: each episode's turns, as many as the table of that name held.
        return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in (*TABLES, "turns")}


def conversation_of(engine: Engine, run_key: str, trial: str, episode: int, trace_source: str = "main"):
    """[(role, exact text)] of one stored episode, texts rebuilt from content/content_raw."""
    from warehouse.texts import join_text

    with engine.connect() as conn:
        rows = conn.execute(text("""
            SELECT tu.role, m.content, m.content_raw
            FROM turns tu
            JOIN episodes e ON e.id = tu.episode_id
            JOIN trials tr ON tr.id = e.trial_id
            JOIN runs r ON r.id = tr.run_id
            LEFT JOIN messages m ON m.id = tu.message_id
            WHERE r.run_key = :run AND tr.trial_name = :trial AND e.episode_index = :ep
              AND e.trace_source = :ts
            ORDER BY tu.idx"""), dict(run=run_key, trial=trial, ep=episode, ts=trace_source)).all()
    return [(role, join_text(content, bytes(raw) if raw is not None else None)) for role, content, raw in rows]


def next_line(process: subprocess.Popen, seconds: float = 60.0) -> str:
    """The process's next line on stderr, or an AssertionError after `seconds`. Read by a thread
    of its own (a select on the pipe would not see lines already in the reader's buffer); what
    it has read is `process.lines.queue`, all of it once `process.reader` has ended."""
    if not hasattr(process, "lines"):
        process.lines = queue.Queue()
        process.reader = threading.Thread(target=lambda: [process.lines.put(line) for line in process.stderr],
                                          daemon=True)
        process.reader.start()
    try:
        return process.lines.get(timeout=seconds)
    except queue.Empty:
        raise AssertionError(f"no line within {seconds:.0f} s") from None


def read_terminal(master: int) -> tuple[threading.Thread, bytearray]:
    """A thread reading what is written to a pseudo-terminal (its `master` end) into the
    bytearray it returns beside it, until the other end closes."""
    screen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end closed
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return reader, screen
