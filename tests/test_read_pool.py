"""Read sessions reuse their connection (warehouse.readonly pools them) and nothing passes from
one session to the next: each starts as the reader role, READ ONLY, with its own time limit, and
with nothing an earlier one left on the connection (each ends with what DISCARD ALL resets, but
for the prepared statements of statements that passed the checks, kept so a query asked again
is one round trip). A pooled connection the server has closed is replaced, not handed to a
query."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.engine import make_url

from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.db.roles import reader_role
from warehouse.readonly import readonly_session, run_readonly

# The PostgreSQL read pool only. SQLite's read connections were pooled before; what keeps them
# clean is the file opened read-only and the authorizer, which tests/test_sql_attacks.py covers.
pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
def pg_url(db_url) -> str:
    return db_url


LEAK_KEY = 0x6C65616B  # "leak": an advisory lock key nothing else takes


def _state(url: str, timeout: float, *, leave_a_lock: bool = False, leave_a_mess: bool = False) -> tuple:
    """(backend pid, user, statement_timeout, transaction_read_only, application_name, open
    cursors) of a fresh session."""
    with readonly_session(url, timeout=timeout) as session:
        raw = session.connection.connection.driver_connection
        if leave_a_lock:
            # What no statement can do through the session (sqlcheck refuses the lock functions),
            # done on its connection directly: a session-level lock, which a rollback keeps.
            raw.execute("SELECT pg_advisory_lock(%s)", [LEAK_KEY])
        if leave_a_mess:  # the same for a session's setting and a cursor that outlives its transaction
            raw.execute("SET application_name = 'leak'")
            raw.execute("DECLARE leak CURSOR WITH HOLD FOR SELECT 1")
        [row] = session.fetch("SELECT pg_backend_pid(), current_user, current_setting('statement_timeout'), "
                              "current_setting('transaction_read_only'), current_setting('application_name'), "
                              "(SELECT count(*) FROM pg_cursors WHERE name = 'leak')").rows
    return row


def _lock_holders(url: str) -> list[int]:
    admin = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        return [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())", [LEAK_KEY])]


def test_a_pooled_connection_starts_each_session_clean(pg_url):
    first = _state(pg_url, timeout=5, leave_a_lock=True, leave_a_mess=True)
    assert _lock_holders(pg_url) == [], "the session's lock outlived it, on the pooled connection"
    second = _state(pg_url, timeout=7)
    assert first[0] == second[0], "the second session should reuse the first one's connection"
    reader = reader_role(make_url(pg_url).database)
    assert first[1:] == (reader, "5s", "on", "leak", 1)
    assert second[1:] == (reader, "7s", "on", "", 0)


def test_a_failed_statement_leaves_the_pooled_connection_usable(pg_url):
    with pytest.raises(WarehouseError, match="division by zero"):
        with readonly_session(pg_url) as session:
            session.fetch("SELECT 1 / (SELECT count(*) - count(*) FROM runs)")
    first = _state(pg_url, timeout=5)
    assert _state(pg_url, timeout=5)[0] == first[0]
    assert first[1:4] == (reader_role(make_url(pg_url).database), "5s", "on")


def test_a_query_asked_again_is_not_parsed_again(pg_url):
    """The second time a pooled connection is asked a statement, it runs the statement prepared
    the first time (one round trip, no parsing or planning): the server still holds it."""
    statement = "SELECT count(*) FROM runs WHERE run_key <> :key"
    pids = []
    for _ in range(2):
        with readonly_session(pg_url) as session:
            assert session.fetch(statement, {"key": "x"}).rows == [(0,)]
            pids.append(session.fetch("SELECT pg_backend_pid()").rows[0][0])
    with readonly_session(pg_url) as session:
        raw = session.connection.connection.driver_connection
        prepared = [row[0] for row in raw.execute("SELECT statement FROM pg_prepared_statements").fetchall()]
        assert pids[0] == pids[1] == session.fetch("SELECT pg_backend_pid()").rows[0][0]
    assert [text for text in prepared if "run_key <> $1" in text] != [], prepared


def test_a_connection_the_server_closed_is_replaced(pg_url):
    pid = _state(pg_url, timeout=5)[0]
    admin = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s, 5000)", [pid]).fetchone() == (True,)
    assert run_readonly(pg_url, "SELECT 41 + 1").rows == [(42,)]


def test_a_statement_outside_the_sessions_transaction_is_read_only_too(pg_url):
    """The session's BEGIN sets READ ONLY; the connection's own default does too, for anything
    that would run outside that transaction."""
    with readonly_session(pg_url) as session:
        raw = session.connection.connection.driver_connection
        raw.execute("COMMIT")  # out of the session's transaction, by hand
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            raw.execute("CREATE TABLE leak (a int)")
    assert run_readonly(pg_url, "SELECT count(*) FROM pg_tables WHERE tablename = 'leak'").rows == [(0,)]


def _other_sessions(url: str) -> list[str]:
    """The states of the database's sessions but the asking one (the read pool's among them)."""
    admin = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        return [state for (state,) in conn.execute(
            "SELECT state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'")]


@pytest.mark.parametrize(("name", "given", "filters"), [
    ("runs", {}, None),  # the statement carries its COMMIT
    ("lengths", {}, None),  # reads more after its statement (the ranks), in the same snapshot
    ("failures", {}, Filters(runs=("nosuch",))),  # fails after the transaction began
])
def test_a_canned_query_leaves_no_transaction_open(pg_url, name, given, filters):
    """A canned query's session ends with its statement's round trip, or after its last read, or
    after an error: whichever, its pooled connection is idle, not idle in a transaction (which
    would hold a snapshot and locks, and block a migration, for as long as the process lives)."""
    from warehouse.queries import QUERIES, run_canned

    try:
        run_canned(pg_url, QUERIES[name], given, filters=filters)
    except WarehouseError as exc:
        assert filters is not None, exc
    states = _other_sessions(pg_url)
    assert "idle" in states and not [s for s in states if s.startswith("idle in transaction")], states
    if filters is None:  # and ended by COMMIT: psycopg forgets its prepared statements on a ROLLBACK
        with readonly_session(pg_url) as session:
            [(prepared,)] = session.fetch("SELECT count(*) FROM pg_prepared_statements "
                                          "WHERE statement NOT LIKE '%pg_prepared_statements%'").rows
        assert prepared > 0


def test_a_callers_text_is_reset_even_after_its_last_statement_ended_the_transaction(pg_url):
    with readonly_session(pg_url) as session:
        session.fetch("SELECT 1", last=True)
        # Outside any transaction now: a session setting, which only the reset undoes.
        session._transaction.conn.connection.driver_connection.execute("SET application_name = 'leak'")
    assert _state(pg_url, timeout=5)[4] == ""
    assert "idle" in _other_sessions(pg_url)
