"""`warehouse db check` verifies the stored conversations (warehouse.db.integrity), not only the
revision: a loaded warehouse passes; each way the conversations can stop holding together
(a turn missing in the middle, an episode on another trial's conversation, turns past the
longest episode) is named in one line, with exit 1, on both backends. And an upgrade from
0013, killed at any moment, leaves the old schema or the new one, never a mix."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from conftest import _pg_admin_conninfo
from ingest.pipeline import ingest
from procs import CLI, run_cli
from tools.long_trial import write_trial

def _check(db_url: str) -> tuple[int, list[str]]:
    done = run_cli(db_url, "db", "check")
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr.splitlines()


def test_db_check_names_each_way_the_conversations_stop_holding_together(engine, db_url, tmp_path):
    for seed in (1, 2):
        assert not ingest(engine, [str(write_trial(tmp_path / "jobs", 12, seed=seed))]).errors
    code, lines = _check(db_url)
    assert code == 0 and lines[-1].endswith("conversations consistent"), lines
    with engine.connect() as conn:
        (first, second), = conn.execute(text("SELECT min(id), max(id) FROM conversations")).all()
        longest = conn.execute(text("SELECT id FROM episodes WHERE conversation_id = :c ORDER BY n_turns DESC, id "
                                    "LIMIT 1"), {"c": first}).scalar()
        other = conn.execute(text("SELECT min(id) FROM episodes WHERE conversation_id = :c"), {"c": second}).scalar()
    breaks = [
        # (the damage, its repair, what db check says)
        (f"UPDATE conversation_turns SET idx = 1000 WHERE conversation_id = {first} AND idx = 5",
         f"UPDATE conversation_turns SET idx = 5 WHERE conversation_id = {first} AND idx = 1000",
         "conversations whose turns are not numbered 0, 1, 2, … without a gap"),
        (f"UPDATE episodes SET conversation_id = {first} WHERE id = {other}",
         f"UPDATE episodes SET conversation_id = {second} WHERE id = {other}",
         "1 episodes whose conversation is another trial's"),
        (f"UPDATE episodes SET n_turns = n_turns - 1 WHERE id = {longest}",
         f"UPDATE episodes SET n_turns = n_turns + 1 WHERE id = {longest}",
         "1 conversations not as long as their longest episode"),
    ]
    for damage, repair, said in breaks:
        with engine.begin() as conn:
            conn.execute(text(damage))
        code, lines = _check(db_url)
        assert code == 1 and any(said in line for line in lines), (damage, lines)
        assert all(line.startswith("Error: ") for line in lines), lines
        with engine.begin() as conn:
            conn.execute(text(repair))
        assert _check(db_url)[0] == 0, repair


def test_db_check_names_a_reference_to_a_row_that_does_not_exist(engine, db_url, tmp_path):
    """The writer keeps references, not the database (SQLite's checks are off for it, PostgreSQL
    declares none on the bulk tables): db check finds every broken one, naming the column."""
    assert not ingest(engine, [str(write_trial(tmp_path / "jobs", 4, seed=3))]).errors
    assert _check(db_url)[0] == 0
    with engine.connect() as conn:
        message = conn.execute(text("SELECT max(message_id) FROM conversation_turns")).scalar()
    unchecked = engine.execution_options(foreign_keys=False)  # as the writer writes (SQLite)
    for damage, repair, said in [
        ("UPDATE conversation_turns SET message_id = 987654321 WHERE message_id = :m",
         "UPDATE conversation_turns SET message_id = :m WHERE message_id = 987654321",
         "conversation_turns.message_id naming a row of messages that does not exist (the first: id 987654321)"),
        ("UPDATE trial_loads SET load_id = 987654321",
         "UPDATE trial_loads SET load_id = (SELECT min(id) FROM loads)",
         "trial_loads.load_id naming a row of loads that does not exist"),
    ]:
        with unchecked.begin() as conn:
            conn.execute(text(damage), {"m": message})
        code, lines = _check(db_url)
        assert code == 1 and any(said in line for line in lines), (damage, lines)
        with unchecked.begin() as conn:
            conn.execute(text(repair), {"m": message})
        assert _check(db_url)[0] == 0, repair


def _layout(engine) -> tuple[str, set[str], str | None]:
    """(revision, tables and views, what `turns` is: 'table' or 'view')."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        found = inspect(conn)
        tables, views = set(found.get_table_names()), set(found.get_view_names())
    return revision, tables | views, "table" if "turns" in tables else "view" if "turns" in views else None


def _writing(engine, target: Path | None) -> bool:
    """Whether the upgrade is inside its transaction: on SQLite it holds the write lock (BEGIN
    IMMEDIATE, which a try here cannot take at once); on PostgreSQL a session of the database
    is inside a transaction that has written."""
    if target is not None:
        probe = sqlite3.connect(target, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:  # database is locked
            return True
        finally:
            probe.close()
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_xid IS NOT NULL")).scalar())


def _until(proc: subprocess.Popen, done) -> float:
    """Poll until done() or the process ends; the time it took."""
    began = time.monotonic()
    while proc.poll() is None and not done():
        time.sleep(0.002)
    return time.monotonic() - began


def _admin(*statements: str) -> None:
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        for statement in statements:
            admin.execute(statement)


def test_an_upgrade_killed_at_any_moment_leaves_the_old_schema_or_the_new(backend, engine, db_url, tmp_path,
                                                                          request):
    """The upgrade from 0013 (0014 rewrites every episode's turns as conversations) is one
    transaction. Killed (SIGKILL) at spread moments while it holds it (and a little after), the database is at
    0013 with its `turns` table and no conversations, or at head with both tables and the
    `turns` view; upgraded again, it checks. The 0013 warehouse: two trials of 300 steps
    loaded at head, then downgraded (180,000 turn rows in 0013's table)."""
    for seed in (1, 2):
        assert not ingest(engine, [str(write_trial(tmp_path / "jobs", 300, seed=seed))]).errors
    engine.dispose()
    assert run_cli(db_url, "db", "downgrade", "0013", "--yes").returncode == 0
    target = Path(db_url.removeprefix("sqlite:///")) if backend == "sqlite" else None
    # The 0013 warehouse kept, each try's starting point: the file, or a database made from it.
    if target is not None:
        shutil.copyfile(target, tmp_path / "0013.db")
    else:
        name = make_url(db_url).database
        kept = f"{name}_0013"
        _admin(f'CREATE DATABASE "{kept}" TEMPLATE "{name}"')
        request.addfinalizer(lambda: _admin(f'DROP DATABASE IF EXISTS "{kept}" WITH (FORCE)'))
    # How long the upgrade holds its transaction: the kills are drawn within it.
    proc = subprocess.Popen([*CLI, "--db", db_url, "db", "upgrade"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _until(proc, lambda: _writing(engine, target))
    window = _until(proc, lambda: not _writing(engine, target))
    assert proc.wait() == 0
    rng = random.Random(26)
    outcomes = []
    for _ in range(6 if backend == "sqlite" else 3):
        if target is not None:
            shutil.copyfile(tmp_path / "0013.db", target)
        else:
            engine.dispose()
            _admin(f'DROP DATABASE "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}" TEMPLATE "{kept}"')
        proc = subprocess.Popen([*CLI, "--db", db_url, "db", "upgrade"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _until(proc, lambda: _writing(engine, target))
        time.sleep(rng.uniform(0, 1.2) * window)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        engine.dispose()
        revision, names, turns = _layout(engine)
        if revision == "0013":
            assert "conversations" not in names and turns == "table", names
        else:
            assert {"conversations", "conversation_turns"} <= names and turns == "view", (revision, names)
        outcomes.append(revision)
        assert run_cli(db_url, "db", "upgrade").returncode == 0
        code, lines = _check(db_url)
        assert code == 0, lines
    assert "0013" in outcomes, outcomes  # kills landed inside the transaction, and it rolled back
