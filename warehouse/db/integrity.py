"""What must hold of a warehouse's stored conversations for every episode to read back its
turns (migration 0014, ingest.write.conversations), checked by `warehouse db check` after an
upgrade or whenever a user doubts a file: read-only, a few aggregate queries, linear in the
rows.

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
    ("episodes pointing at a conversation that does not exist",
     """SELECT count(*), min(e.id) FROM episodes e LEFT JOIN conversations c ON c.id = e.conversation_id
        WHERE e.conversation_id IS NOT NULL AND c.id IS NULL"""),
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
    ("turns naming a message that does not exist",
     """SELECT count(*), min(t.conversation_id) FROM conversation_turns t LEFT JOIN messages m ON m.id = t.message_id
        WHERE t.message_id IS NOT NULL AND m.id IS NULL"""),
)


def problems(conn: Connection) -> list[str]:
    """One line per rule some rows break: how many, and the smallest id among them."""
    out = []
    for what, sql in CHECKS:
        count, example = conn.execute(text(sql)).one()
        if count:
            out.append(f"{count} {what} (the first: id {example})")
    return out
