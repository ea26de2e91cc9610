"""What a read-only statement may be, decided by each backend's own grammar.

PostgreSQL: the text is parsed by PostgreSQL's own parser (libpg_query, through pglast), so
nested comments, dollar quotes and identifiers such as `x$a$` mean here what they mean to the
server. It must hold exactly one statement, a query: SELECT, WITH … SELECT, VALUES, TABLE, or
EXPLAIN of one; with no data-modifying WITH, no row locks (FOR UPDATE/SHARE), no SELECT INTO,
and no call of a function that reaches beyond reading the warehouse's tables (files, programs,
large objects, other backends, WAL, locks, settings, roles, sequences, SQL run from a string).

SQLite: the statement kind is decided by SQLite itself while it compiles the statement (see
warehouse.readonly's authorizer, which allows reading and nothing else); this module only names
the functions refused there.

pglast is imported on first use, on the PostgreSQL path only: `warehouse sql` on SQLite must
start fast.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from warehouse.errors import WarehouseError

# Functions a query may not call, by name (any schema; pg_catalog's are the ones that matter).
# Most of them need a superuser or a privilege the reader role lacks anyway (see README: which
# layer stops what); the ones PUBLIC may call are here because the reader role cannot stop
# them: advisory locks, set_config (which could even undo SET ROLE), the functions that run SQL
# given as a string, and those that write WAL or signal other sessions.
PG_DENIED_FUNCTIONS = frozenset({
    # settings and roles
    "set_config", "pg_reload_conf",
    # SQL from a string, which this check never sees
    "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
    "cursor_to_xmlschema", "ts_stat", "ts_rewrite",
    # other backends
    "pg_terminate_backend", "pg_cancel_backend", "pg_log_backend_memory_contexts", "pg_notify",
    # WAL, replication, backups, the server's own state
    "pg_switch_wal", "pg_logical_emit_message", "pg_create_restore_point", "pg_promote",
    "pg_start_backup", "pg_stop_backup", "pg_rotate_logfile", "pg_current_logfile",
    "pg_import_system_collations", "pg_export_snapshot", "txid_current", "pg_current_xact_id",
    "gin_clean_pending_list", "pg_nextoid",
    # sequences
    "nextval", "setval", "currval", "lastval",
    # large objects (the lo_* ones are matched by prefix)
    "loread", "lowrite",
})
PG_DENIED_PREFIXES = (
    "pg_read_", "pg_ls_", "pg_stat_file", "pg_file_", "lo_",  # the server's files, large objects
    "pg_advisory", "pg_try_advisory",  # locks other sessions wait on
    "pg_stat_reset", "pg_stat_statements_reset",
    "pg_replication_", "pg_logical_", "pg_create_", "pg_drop_", "pg_copy_", "pg_backup_",
    "pg_wal_replay", "pg_rotate_logfile",
    "dblink", "table_to_xml", "schema_to_xml", "database_to_xml", "brin_", "binary_upgrade_",
)

# SQLite functions refused by the authorizer: extension loading, and the file functions of the
# sqlite3 shell and of some builds (absent from Python's sqlite3, refused should they appear).
SQLITE_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})

ONLY_QUERIES = "only a query runs here: SELECT, WITH, VALUES, TABLE, or EXPLAIN of one"

# Statement kinds whose name the generic rule (the node's name in capitals) would spell badly.
_KINDS = {"TransactionStmt": "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT)",
          "VariableSetStmt": "SET", "VariableShowStmt": "SHOW", "CreateTableAsStmt": "CREATE TABLE AS",
          "DoStmt": "DO", "CallStmt": "CALL", "ExplainStmt": "EXPLAIN"}


def pg_denied(name: str) -> bool:
    name = name.lower()
    return name in PG_DENIED_FUNCTIONS or name.startswith(PG_DENIED_PREFIXES)


def check_postgres(sql: str) -> str:
    """"query", or "explain" for an EXPLAIN of one, if `sql` is one query PostgreSQL's grammar
    reads as harmless; else WarehouseError. Parameters are written as the server reads them,
    $1, $2."""
    from pglast.parser import ParseError, parse_sql_json

    try:
        statements = json.loads(parse_sql_json(sql)).get("stmts", [])
    except ParseError as exc:
        message, location = exc.args[0], exc.args[1] if len(exc.args) > 1 else None
        where = "" if location is None else f" (at character {location + 1})"  # none at the end of the input
        raise WarehouseError(f"database error: {message}{where}") from None
    if not statements:
        raise WarehouseError("no SQL statement given")
    if len(statements) > 1:
        raise WarehouseError(f"one statement at a time: this text holds {len(statements)} (nothing was run)")
    ((kind, body),) = statements[0]["stmt"].items()
    explain = kind == "ExplainStmt"
    if explain:
        ((kind, body),) = body["query"].items()
        if kind != "SelectStmt":
            raise WarehouseError(f"read-only: EXPLAIN of {_kind(kind)} is not allowed; {ONLY_QUERIES}")
    if kind != "SelectStmt":
        named = "ANALYZE" if kind == "VacuumStmt" and not body.get("is_vacuumcmd") else _kind(kind)
        raise WarehouseError(f"read-only: {named} is not allowed; {ONLY_QUERIES}")
    for node, fields in _nodes(body):
        if node.endswith("Stmt") and node != "SelectStmt":
            raise WarehouseError(f"read-only: {_kind(node)} inside a query is not allowed")
        if node == "LockingClause":
            raise WarehouseError("read-only: row locks (FOR UPDATE, FOR SHARE) are not allowed")
        if node == "IntoClause":
            raise WarehouseError("read-only: SELECT INTO is not allowed")
        for name in _called_names(node, fields):
            if pg_denied(name):
                raise WarehouseError(f"read-only: the function {name} is not allowed "
                                     "(it reaches beyond reading the warehouse's tables)")
    return "explain" if explain else "query"


def _nodes(tree: Any) -> Iterator[tuple[str, dict]]:
    """Every node of a libpg_query JSON tree, as (its type, its fields). A node is a one-key
    object whose key is a type name (capitalized); fields are camelCase."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if key[:1].isupper() and isinstance(value, dict):
                    yield key, value
                stack.append(value)


def _called_names(node: str, fields: dict) -> list[str]:
    """Names this node may call a function by: f(…), and the attribute notation PostgreSQL also
    reads as a call, (x).f and t.f."""
    if node == "FuncCall":
        names = fields.get("funcname", [])[-1:]  # [schema,] name
    elif node == "ColumnRef":
        names = fields.get("fields", [])[-1:]
    elif node == "A_Indirection":
        names = fields.get("indirection", [])
    else:
        return []
    return [n["String"]["sval"] for n in names if "String" in n]


def _kind(node: str) -> str:
    if node in _KINDS:
        return _KINDS[node]
    return " ".join(re.findall(r"[A-Z][a-z]*", node.removesuffix("Stmt"))).upper()
