"""The summary tables the canned queries read (see warehouse.db.models): trial_lengths,
run_task_breakdown, run_task_outcomes and run_sources, kept exact as units are written.

Every unit calls refresh() in its own transaction, after its rows and before its ledger row, so
the summaries are never behind what the ledger says is loaded and a crash leaves neither half
written. A refresh recomputes, from the base tables, only what the unit can have changed: the
lengths of the trials it touched, the outcomes of every (run, task) those trials are in, and
the sources of the runs its trials belong to. Nothing else already loaded is read again.

Migration 0004 fills the same tables from existing data with its own copy of these statements.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text

# A trial succeeds in the summaries when its reward is at least this: the canned queries'
# default --threshold. Any other threshold is answered from the base tables.
SUCCESS_THRESHOLD = 1.0


def check_threshold(value: float, conn: Connection | None = None) -> float:
    """A success threshold as given (--threshold, `threshold=`), or ArgumentValueError in one line: a
    finite number, in [0, 1] (the rewards of most verifiers) or, where the stored rewards reach
    further (Harbor's rewards are any floats: a score out of 100, a negative penalty), within
    them. Beyond both, every trial with a reward or none would succeed whatever the value: a
    slip (`5` for `0.5`, `-5`), not a question. `conn` looks up the rewards' range (only for a
    value outside [0, 1]); without it only finiteness is checked."""
    from warehouse.errors import ArgumentValueError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentValueError(f"--threshold must be a finite number, not {value!r}")
    if conn is None or 0 <= value <= 1:
        return value
    low, high = conn.execute(text("SELECT min(reward), max(reward) FROM trials")).one()
    low, high = min(0.0, low if low is not None else 0.0), max(1.0, high if high is not None else 1.0)
    if not low <= value <= high:
        raise ArgumentValueError(f"--threshold must lie between {low:g} and {high:g} (0 to 1, or further where "
                          f"the rewards stored do), not {value:g}")
    return value

# The touched trials and their (run, task) keys are staged in temporary tables, so the statements
# below stay plain SQL on both backends however many trials a unit touched. The staged rows drive
# every join, so a refresh reads what is under its keys and no more: `k CROSS JOIN x WHERE ...`
# pins them as SQLite's outer loop. PostgreSQL reads it as a plain join, and with hash and merge
# joins allowed it read every trial, episode and length once per unit instead (a 20th of the
# table staged looks cheaper scanned than searched): a refresh took 0.2 s into an empty
# warehouse and 0.8 s at the 16th unit of math×20. _NESTED_LOOPS keeps it to searches by the
# staged keys.
_STAGE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS summary_trials (trial_id BIGINT PRIMARY KEY)",
    "CREATE TEMPORARY TABLE IF NOT EXISTS summary_keys (run_id BIGINT NOT NULL, task_id BIGINT)",
)
# Emptied for each refresh. On PostgreSQL by TRUNCATE: a temporary table is never vacuumed, so the
# rows a DELETE leaves dead would pile up over a connection's units and be scanned by each.
_EMPTY = {"postgresql": ("TRUNCATE summary_trials, summary_keys",),
          "sqlite": ("DELETE FROM summary_trials", "DELETE FROM summary_keys")}
_NESTED_LOOPS = {"enable_hashjoin": "off", "enable_mergejoin": "off"}
# Staged by ranges of ids: a unit's new trials have consecutive ids, so one statement usually
# stages them all, where a row per id would cost more than the whole refresh.
_STAGE_TRIALS = "INSERT INTO summary_trials (trial_id) SELECT id FROM trials WHERE id BETWEEN :first AND :last"

# Every (run, task) a touched trial is in, and its run's unknown task: a trial's task can be
# filled in later, so that is a key it may have left. (The other: the task a trial had while it
# ran, which the writer hands in, see _LEFT_KEY.)
_KEYS = """
INSERT INTO summary_keys (run_id, task_id)
WITH touched AS (
    SELECT DISTINCT tr.run_id, tr.task_id
    FROM summary_trials t CROSS JOIN trials tr
    WHERE tr.id = t.trial_id
)
SELECT run_id, task_id FROM touched
UNION
SELECT run_id, NULL FROM touched
"""

def own_trace_sql(episodes: str = "e") -> str:
    """The condition that an episode (of the table or alias `episodes`) is one of its trial's own
    conversations: its main trajectory ("main"), each step of a multi-step trial (Harbor's
    steps/<name>/ folders, stored as "step:<name>"), or a further step's episodes of a Harbor
    export read alone ("main#<n>": the export has no step marker; ingest.write.settle). Subagents
    ("summarization-…", "step:<name>/…") are not the trial's length. queries/lengths.sql says the
    same. substr, not LIKE: SQLite's LIKE ignores case, PostgreSQL's does not."""
    ts = f"{episodes}.trace_source"
    return (f"({ts} = 'main' OR substr({ts}, 1, 5) = 'main#' "
            f"OR (substr({ts}, 1, 5) = 'step:' AND {ts} NOT LIKE '%/%'))")


_OWN_TRACE = own_trace_sql("e")

# A (run, task) key a trial left (for another task, or removed), unless staged already: a key
# staged twice would count its trials twice. An unknown task (NULL) is a key too.
_LEFT_KEY = """
INSERT INTO summary_keys (run_id, task_id)
SELECT :run_id, :task_id
WHERE NOT EXISTS (SELECT 1 FROM summary_keys k WHERE k.run_id = :run_id
                  AND (k.task_id = :task_id OR (k.task_id IS NULL AND CAST(:task_id AS BIGINT) IS NULL)))
"""

_TRIAL_LENGTHS = (
    "DELETE FROM trial_lengths WHERE trial_id IN (SELECT trial_id FROM summary_trials)",
    # Each own conversation's longest episode is its whole trajectory: an export of every episode
    # repeats the earlier ones as prefixes. Ties go to the later episode, as in
    # queries/lengths.sql. A multi-step trial's length is the sum over its steps (each step is a
    # conversation of its own); a single-step trial's is its longest main episode. The staged
    # trials' episodes are read once and ranked in their conversation: a correlated subquery per
    # conversation cost PostgreSQL two scans of all episodes and an index walk of all trials
    # per unit (0.9 s a unit at math×20, growing with the warehouse; ranked, 0.4 s).
    f"""
    INSERT INTO trial_lengths (trial_id, run_id, turns, chars, input_tokens, output_tokens)
    SELECT tr.id, tr.run_id, sum(l.n_turns), sum(l.n_chars), tr.n_input_tokens, tr.n_output_tokens
    FROM (SELECT e.trial_id, e.n_turns, e.n_chars,
                 row_number() OVER (PARTITION BY e.trial_id, e.trace_source
                                    ORDER BY e.n_turns DESC, e.episode_index DESC) AS place
          FROM summary_trials t CROSS JOIN episodes e
          WHERE e.trial_id = t.trial_id AND {_OWN_TRACE}) l
    CROSS JOIN trials tr
    WHERE l.place = 1 AND tr.id = l.trial_id
    GROUP BY tr.id, tr.run_id, tr.n_input_tokens, tr.n_output_tokens
    """,
    # The trials with no conversation: their tokens only.
    """
    INSERT INTO trial_lengths (trial_id, run_id, turns, chars, input_tokens, output_tokens)
    SELECT tr.id, tr.run_id, NULL, NULL, tr.n_input_tokens, tr.n_output_tokens
    FROM summary_trials t
    CROSS JOIN trials tr
    WHERE tr.id = t.trial_id
      AND NOT EXISTS (SELECT 1 FROM trial_lengths l WHERE l.trial_id = tr.id)
    """,
)

_OUTCOME_COLUMNS = (
    "n_trials, n_complete, n_incomplete, n_successes, n_rewards, reward_sum, first_started, "
    "last_started, n_with_trajectory, n_with_input_tokens, n_with_output_tokens"
)


def _under_keys(rows: str, columns: str) -> str:
    """The `rows` (a table or join whose keyed table is x) under a staged key, as the derived
    table x. A NULL task equals nothing, so unknown tasks are matched on their own: two indexed
    joins rather than one OR that no index serves."""
    return f"""(
        SELECT {columns} FROM summary_keys k CROSS JOIN {rows}
        WHERE x.run_id = k.run_id AND x.task_id = k.task_id
        UNION ALL
        SELECT {columns} FROM summary_keys k CROSS JOIN {rows}
        WHERE x.run_id = k.run_id AND x.task_id IS NULL AND k.task_id IS NULL) x"""


_OUTCOMES = (
    *(f"DELETE FROM {table} WHERE id IN (SELECT x.id FROM {_under_keys(table + ' x', 'x.id')})"
      for table in ("run_task_breakdown", "run_task_outcomes")),
    # From the trials, through the covering index ix_trials_outcomes; their lengths were
    # refreshed first.
    f"""
    INSERT INTO run_task_breakdown (run_id, task_id, agent, model, exception_type, {_OUTCOME_COLUMNS})
    SELECT x.run_id, x.task_id, x.agent, x.model, x.exception_type,
           count(*),
           sum(CASE WHEN x.status = 'complete' THEN 1 ELSE 0 END),
           sum(CASE WHEN x.status = 'incomplete' THEN 1 ELSE 0 END),
           sum(CASE WHEN x.reward >= {SUCCESS_THRESHOLD} THEN 1 ELSE 0 END),
           count(x.reward), sum(x.reward), min(x.started_at), max(x.started_at),
           count(x.turns), count(x.input_tokens), count(x.output_tokens)
    FROM {_under_keys("trials x JOIN trial_lengths l ON l.trial_id = x.id",
                      "x.run_id, x.task_id, x.agent, x.model, x.exception_type, x.status, x.reward, "
                      "x.started_at, l.turns, l.input_tokens, l.output_tokens")}
    GROUP BY x.run_id, x.task_id, x.agent, x.model, x.exception_type
    """,
    # The breakdown just written, summed per (run, task).
    f"""
    INSERT INTO run_task_outcomes (run_id, task_id, n_errors, {_OUTCOME_COLUMNS})
    SELECT x.run_id, x.task_id,
           sum(CASE WHEN x.exception_type IS NOT NULL THEN x.n_trials ELSE 0 END),
           sum(x.n_trials), sum(x.n_complete), sum(x.n_incomplete), sum(x.n_successes),
           sum(x.n_rewards), sum(x.reward_sum), min(x.first_started), max(x.last_started),
           sum(x.n_with_trajectory), sum(x.n_with_input_tokens), sum(x.n_with_output_tokens)
    FROM {_under_keys("run_task_breakdown x", "x.*")}
    GROUP BY x.run_id, x.task_id
    """,
)

# This unit's source joins the runs of every trial it mentions, changed or not. (A run loses a
# source only when the trials it held there are removed: ingest.write.removal.)
_RUN_SOURCES = """
INSERT INTO run_sources (run_id, source_id)
SELECT :run_id, l.source_id
FROM loads l
WHERE l.id = :load_id
  AND NOT EXISTS (SELECT 1 FROM run_sources rs WHERE rs.run_id = :run_id AND rs.source_id = l.source_id)
"""


def refresh(conn: Connection, load_id: int, trial_ids: Collection[int], run_ids: Collection[int],
            left_keys: Collection[tuple[int, int]] = ()) -> None:
    """Bring the summaries up to date with what the unit `load_id` wrote, inside its
    transaction. `trial_ids`: the trials it inserted, filled in or gave new episodes;
    `run_ids`: the runs of every trial it mentions (those it gave a trial_loads row);
    `left_keys`: the (run, task) keys its trials were under before it gave them another task or
    removed them (ingest.write.removal)."""
    if run_ids:
        conn.execute(text(_RUN_SOURCES), [{"load_id": load_id, "run_id": run_id} for run_id in sorted(run_ids)])
    if not trial_ids and not left_keys:
        return
    for statement in (*_STAGE, *_EMPTY[conn.dialect.name]):
        conn.execute(text(statement))
    if trial_ids:
        conn.execute(text(_STAGE_TRIALS), [{"first": first, "last": last} for first, last in _id_ranges(trial_ids)])
    with _planned_by_keys(conn):
        # PostgreSQL plans from statistics, and a temporary table has none until analyzed: it
        # would be planned as holding as many rows as the largest unit staged on this connection did.
        conn.execute(text("ANALYZE summary_trials"))
        conn.execute(text(_KEYS))
        for run_id, task_id in sorted(left_keys, key=lambda key: (key[0], key[1] is None, key[1] or 0)):
            conn.execute(text(_LEFT_KEY), {"run_id": run_id, "task_id": task_id})
        conn.execute(text("ANALYZE summary_keys"))
        for statement in (*_TRIAL_LENGTHS, *_OUTCOMES):
            conn.execute(text(statement))


@contextmanager
def _planned_by_keys(conn: Connection) -> Iterator[None]:
    """PostgreSQL: the statements inside joined by nested loops from the staged rows
    (_NESTED_LOOPS), and the transaction's settings as they were after."""
    if conn.dialect.name != "postgresql":
        yield
        return
    names = sorted(_NESTED_LOOPS)
    before = conn.execute(text("SELECT " + ", ".join(f"current_setting('{n}')" for n in names))).one()
    conn.execute(text("SELECT " + ", ".join(f"set_config('{n}', '{_NESTED_LOOPS[n]}', true)" for n in names)))
    yield
    conn.execute(text("SELECT " + ", ".join(f"set_config('{n}', :v{i}, true)" for i, n in enumerate(names))),
                 {f"v{i}": value for i, value in enumerate(before)})


def _id_ranges(ids: Collection[int]) -> list[tuple[int, int]]:
    """The ids as (first, last) ranges of consecutive ids, in order."""
    ranges: list[list[int]] = []
    for i in sorted(ids):
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return [(first, last) for first, last in ranges]
