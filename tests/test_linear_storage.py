"""A trajectory's cost grows with its steps, not their square (issue 26): trace trials of 1×, 5×
and 20× the steps (tools.long_trial), loaded one after another, each add one conversation of
2n + 1 turns and n episodes, and database bytes in proportion to their steps. Before, every
episode held its own copy of the turns before it: 20× the steps made 400× the turn rows.
The memory of reading a trial is counted (tracemalloc); time and whole-process memory are
measured in the benchmark (bench/long_trial.py)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from sqlalchemy import text

from ingest.pipeline import ingest
from ingest.read import traces
from ingest.shape.prepare import prepare
from tools.long_trial import write_trial

BASE_STEPS = 400


def _state(engine) -> tuple[int, int, int]:
    """(conversation turn rows, episodes, bytes of the database's tables)."""
    with engine.connect() as conn:
        turns = conn.execute(text("SELECT count(*) FROM conversation_turns")).scalar()
        episodes = conn.execute(text("SELECT count(*) FROM episodes")).scalar()
        if engine.dialect.name == "sqlite":
            size = conn.execute(text("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
                                     )).scalar()
        else:
            size = conn.execute(text("""SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
                                        JOIN pg_namespace n ON n.oid = c.relnamespace
                                        WHERE n.nspname = current_schema() AND c.relkind = 'r'""")).scalar()
    return turns, episodes, int(size)


def test_a_trajectorys_rows_and_bytes_grow_linearly_with_its_steps(engine, tmp_path: Path):
    before = _state(engine)
    added = {}
    for factor in (1, 5, 20):
        steps = BASE_STEPS * factor
        summary = ingest(engine, [str(write_trial(tmp_path / "jobs", steps, seed=factor))])
        assert not summary.errors, summary.errors
        after = _state(engine)
        added[factor] = tuple(a - b for a, b in zip(after, before))
        before = after
        turns, episodes, _ = added[factor]
        # A system prompt and the task, then each step's message and its output, one row each;
        # the last output is no episode's (as in Harbor's export: kept in its step's extra).
        assert (turns, episodes) == (2 * steps + 1, steps), factor
    per_step = {factor: added[factor][2] / (BASE_STEPS * factor) for factor in added}
    # Later trials repeat some of the earlier ones' outputs (stored once), so a step may cost
    # less; it does not cost more as the trajectory grows, beyond how full the pages of an index
    # on random keys (message hashes) happen to be (measured: within 18%). Storing each
    # episode's turns, a step of the 20× trial cost about 20 times one of the 1× trial.
    assert per_step[5] <= 1.3 * per_step[1] and per_step[20] <= 1.3 * per_step[1], per_step


def _peak_bytes_to_read_and_shape(job: Path) -> int:
    """Peak bytes allocated while a trial is read and made ready for the writer (what the
    reader process holds at once), by tracemalloc: counted, not timed."""
    unit = next(u for u in traces.discover(job) if u.kind == "trial")
    tracemalloc.start()
    try:
        batch = prepare([traces.read_trial(unit, traces.run_key_for(unit))])
        assert batch.episodes
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_trajectory_takes_memory_in_proportion_to_its_steps(tmp_path: Path):
    peak = {factor: _peak_bytes_to_read_and_shape(write_trial(tmp_path / str(factor), BASE_STEPS * factor))
            for factor in (1, 5, 20)}
    # Each episode a list of the turns before it made the 20× trial take about 400 times the
    # memory of the 1× one; the file's bytes and turns are what grows now.
    assert peak[5] <= 6 * peak[1] and peak[20] <= 24 * peak[1], peak


def test_real_trials_store_at_most_twice_their_longest_episode(engine):
    """The real Harbor trials under tests/fixtures/harbor/jobs (a single-step trial of 5
    episodes, a 4-step trial of 21 whose steps are conversations of their own): the turns a trial
    stores are at most twice its longest episode's (they held every episode's turns: 366 rows
    for the two, against 42 now)."""
    jobs = Path(__file__).parent / "fixtures" / "harbor" / "jobs"
    assert not ingest(engine, [str(jobs)]).errors
    with engine.connect() as conn:
        rows = conn.execute(text("""
            SELECT t.trial_name, max(e.n_turns), sum(e.n_turns),
                   (SELECT count(*) FROM conversation_turns ct JOIN conversations c ON c.id = ct.conversation_id
                    WHERE c.trial_id = t.id)
            FROM trials t JOIN episodes e ON e.trial_id = t.id GROUP BY t.id, t.trial_name""")).all()
    assert len(rows) == 2
    for name, longest, held_before, stored in rows:
        assert longest <= stored <= 2 * longest, (name, longest, stored)
    assert sum(r[2] for r in rows) == 366 and sum(r[3] for r in rows) == 42, rows
