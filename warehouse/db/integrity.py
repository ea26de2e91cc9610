"""What must hold of a warehouse's rows: every reference names a row that exists (the writer
keeps them, not the database: migration 0016), and the stored conversations hold together so
that every episode reads back its turns (migration 0014, ingest.write.conversations). Checked
by `warehouse db check` after an upgrade or whenever a user doubts a file: read-only, a few
aggregate queries, linear in the rows.

Each check is a query counting the rows that break a rule, with the smallest id among them for
the message; none may find any.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

# (what breaks the rule, a query giving (how many, an example id))
CHECKS: tuple[tuple[str, str], ...] = (
    ("episodes with turns but no conversation, or a conversation but no turns",
     "SELECT count(*), min(id) FROM episodes WHERE (n_turns > 0) <> (conversation_id IS NOT NULL)"),
    ("episodes whose conversation is another trial's",
     """SELECT count(*), min(e.id) FROM episodes e JOIN conversations c ON c.id = e.conversation_id
        WHERE c.trial_id <> e.trial_id"""),
    ("conversations whose turns are not numbered 0, 1, 2, … without a gap",
     """SELECT count(*), min(conversation_id) FROM (
            SELECT conversation_id FROM conversation_turns GROUP BY conversation_id
            HAVING min(idx) <> 0 OR max(idx) <> count(*) - 1) gaps"""),
    ("episodes longer than their conversation",
     """SELECT count(*), min(e.id) FROM episodes e
        JOIN (SELECT conversation_id, count(*) AS n FROM conversation_turns GROUP BY conversation_id) l
          ON l.conversation_id = e.conversation_id
        WHERE e.n_turns > l.n"""),
    ("conversations not as long as their longest episode",
     """SELECT count(*), min(c.id) FROM conversations c
        LEFT JOIN (SELECT conversation_id, count(*) AS n FROM conversation_turns GROUP BY conversation_id) l
          ON l.conversation_id = c.id
        LEFT JOIN (SELECT conversation_id, max(n_turns) AS n FROM episodes GROUP BY conversation_id) r
          ON r.conversation_id = c.id
        WHERE coalesce(l.n, 0) <> coalesce(r.n, 0)"""),
)


def _references() -> tuple[tuple[str, str], ...]:
    """A check per reference the models declare: rows naming a row that does not exist. The
    ingest writer keeps references itself (SQLite's per-row checks are off for it; PostgreSQL
    declares none on the bulk tables, migration 0016), so this is where they are proved."""
    from warehouse.db.models import metadata

    checks = []
    for table in metadata.sorted_tables:
        for fk in sorted(table.foreign_keys, key=lambda fk: fk.parent.name):
            column, target = fk.parent.name, fk.column
            checks.append((
                f"{table.name}.{column} naming a row of {target.table.name} that does not exist",
                f"SELECT count(*), min(c.{column}) FROM {table.name} c "
                f"LEFT JOIN {target.table.name} p ON p.{target.name} = c.{column} "
                f"WHERE c.{column} IS NOT NULL AND p.{target.name} IS NULL"))
    return tuple(checks)


REFERENCES = _references()


def problems(conn: Connection) -> list[str]:
    """One line per rule some rows break: how many, and the smallest id among them (for a
    reference, the smallest id named that does not exist)."""
    return broken_references(conn) + _broken(conn, CHECKS)


def broken_references(conn: Connection) -> list[str]:
    """problems' lines for the references alone: what a copy and the tests' dumps check."""
    return _broken(conn, REFERENCES)


def _broken(conn: Connection, checks: tuple[tuple[str, str], ...]) -> list[str]:
    out = []
    for what, sql in checks:
        count, example = conn.execute(text(sql)).one()
        if count:
            out.append(f"{count} {what} (the first: id {example})")
    return out
