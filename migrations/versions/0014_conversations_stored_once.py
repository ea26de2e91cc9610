"""A conversation is stored once; an episode is a prefix of one.

Harbor exports every episode of a trajectory whole, so the `turns` table held each earlier
turn again in every later episode: a trajectory of n steps cost n^2/2 rows. Now a trial's
turns are stored once per distinct conversation (`conversations`, `conversation_turns`), and
an episode points at its conversation (`episodes.conversation_id`) and keeps its length
(`episodes.n_turns`). `turns` becomes a view with the columns the table had: an episode's
turns are its conversation's first n_turns.

A trial's conversations are the longest of its episodes' turn lists (role, message, turn
extra), none a prefix of another: the upgrade takes the trial's episodes longest first, and
each either is a prefix of a conversation already made (it points at it) or makes one. A
conversation takes the id of the episode that made it. Trials are converted a chunk at a time
(about TURNS_PER_CHUNK turn rows), an episode's turns at a time, so the upgrade holds one
episode's turns and its trial's conversations in memory, not its rows. The upgrade is one
transaction (warehouse.db.schema runs every step in one): a kill leaves the old schema. The downgrade writes every episode's turns
out again as a table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Types copied from warehouse.db.types as they were when this revision was written.
Id = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

TURNS_VIEW = """
CREATE VIEW turns AS
SELECT e.id AS episode_id, ct.idx, ct.role, ct.message_id, ct.extra
FROM episodes e JOIN conversation_turns ct ON ct.conversation_id = e.conversation_id AND ct.idx < e.n_turns
"""
# As 0001 made it: dropped and made again, as it reads `turns`.
TURN_TEXT = """
CREATE VIEW turn_text AS
SELECT t.episode_id, t.idx, t.role, m.content
FROM turns t LEFT JOIN messages m ON m.id = t.message_id
"""

# As 0001 made it (the SQLite downgrade makes it again).
TRIAL_SUMMARY = """
CREATE VIEW trial_summary AS
SELECT tr.id AS trial_id, r.run_key, tk.name AS task, tr.trial_name, tr.agent, tr.model,
       tr.result, tr.reward, tr.exception_type, tr.status, tr.started_at,
       (SELECT count(*) FROM episodes e WHERE e.trial_id = tr.id) AS n_episodes
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN tasks tk ON tk.id = tr.task_id
"""

TURNS_PER_CHUNK = 100_000


def _turn_key(role, message_id, extra) -> bytes:
    """A turn's identity within a warehouse: its role, message and extra fields."""
    extra_text = "" if extra is None else json.dumps(extra, sort_keys=True, separators=(",", ":"))
    return f"{role}\x00{message_id}\x00{extra_text}".encode("utf-8", "surrogatepass")


def _prefix_hashes(keys: list[bytes]) -> list[bytes]:
    """The hash of each prefix of a turn list (position i: its first i + 1 turns)."""
    out, h = [], b""
    for key in keys:
        h = hashlib.blake2b(h + key, digest_size=16).digest()
        out.append(h)
    return out


class _Trial:
    """One trial's conversations as its episodes arrive longest first: each episode either is a
    prefix of a conversation already made (it points at it) or makes one (its own id)."""

    def __init__(self) -> None:
        self.prefixes: dict[tuple[int, bytes], int] = {}  # (length, prefix hash) -> conversation

    def place(self, ep_id: int, keys: list[bytes]) -> int:
        hashes = _prefix_hashes(keys)
        found = self.prefixes.get((len(hashes), hashes[-1]))
        if found is None:
            found = ep_id
            for n, h in enumerate(hashes, 1):
                self.prefixes.setdefault((n, h), ep_id)
        return found


def _chunks(conn) -> list[list[int]]:
    """The trials with turns, in runs of about TURNS_PER_CHUNK turn rows (a trial alone when it
    has more), so that a chunk's statements are few and its memory bounded."""
    chunks: list[list[int]] = [[]]
    size = 0
    for trial_id, n_turns in conn.execute(sa.text(
            "SELECT trial_id, sum(n_turns) FROM episodes WHERE n_turns > 0 GROUP BY trial_id ORDER BY trial_id")):
        if chunks[-1] and size + n_turns > TURNS_PER_CHUNK:
            chunks.append([])
            size = 0
        chunks[-1].append(trial_id)
        size += n_turns
    return [chunk for chunk in chunks if chunk]


def upgrade() -> None:
    conn = op.get_bind()
    op.execute("DROP VIEW turn_text")
    op.create_table(
        "conversations",
        sa.Column("id", Id, primary_key=True),
        sa.Column("trial_id", Id, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], name=op.f("fk_conversations_trial_id_trials")),
    )
    op.create_index(op.f("ix_conversations_trial_id"), "conversations", ["trial_id"])
    op.create_table(
        "conversation_turns",
        sa.Column("conversation_id", Id, nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("message_id", Id),
        sa.Column("extra", Json),
        sa.PrimaryKeyConstraint("conversation_id", "idx", name=op.f("pk_conversation_turns")),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"],
                                name=op.f("fk_conversation_turns_conversation_id_conversations")),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"],
                                name=op.f("fk_conversation_turns_message_id_messages")),
    )
    if conn.dialect.name == "sqlite":
        # A plain ALTER TABLE: a batch copy of `episodes` would fail on the views that read it.
        op.execute("ALTER TABLE episodes ADD COLUMN conversation_id INTEGER CONSTRAINT "
                   "fk_episodes_conversation_id_conversations REFERENCES conversations (id)")
    else:
        op.add_column("episodes", sa.Column("conversation_id", Id))
        op.create_foreign_key(op.f("fk_episodes_conversation_id_conversations"), "episodes", "conversations",
                              ["conversation_id"], ["id"])

    meta = sa.MetaData()
    turns = sa.Table("turns", meta, sa.Column("episode_id", Id), sa.Column("idx", sa.Integer()),
                     sa.Column("role", sa.Text()), sa.Column("message_id", Id), sa.Column("extra", Json))
    episodes = sa.Table("episodes", meta, sa.Column("id", Id), sa.Column("trial_id", Id),
                        sa.Column("conversation_id", Id))
    conversations = sa.Table("conversations", meta, sa.Column("id", Id), sa.Column("trial_id", Id))
    for chunk in _chunks(conn):
        made: dict[int, int] = {}  # episode id -> conversation id
        trial_of: dict[int, int] = {}  # of each conversation
        trial, trial_id, ep_id, keys = None, None, None, []

        def place() -> None:
            if ep_id is not None:
                made[ep_id] = trial.place(ep_id, keys)
                trial_of.setdefault(made[ep_id], trial_id)

        # An episode's turns at a time, each trial's episodes longest first: memory holds one
        # episode's turns and the prefixes of the trial's conversations, not the trial's rows.
        for row_trial, row_ep, role, message_id, extra in conn.execute(
                sa.select(episodes.c.trial_id, turns.c.episode_id, turns.c.role, turns.c.message_id, turns.c.extra)
                .join(episodes, episodes.c.id == turns.c.episode_id)
                .where(episodes.c.trial_id.in_(chunk))
                .order_by(episodes.c.trial_id, sa.text("episodes.n_turns DESC"), turns.c.episode_id, turns.c.idx)
                .execution_options(yield_per=10_000)):
            if row_ep != ep_id:
                place()
                if row_trial != trial_id:
                    trial, trial_id = _Trial(), row_trial
                ep_id, keys = row_ep, []
            keys.append(_turn_key(role, message_id, extra))
        place()
        founders = sorted(set(made.values()))
        if not founders:
            continue
        conn.execute(conversations.insert(), [{"id": c, "trial_id": trial_of[c]} for c in founders])
        for at in range(0, len(founders), 500):
            ids = ", ".join(str(i) for i in founders[at:at + 500])
            conn.execute(sa.text(
                "INSERT INTO conversation_turns (conversation_id, idx, role, message_id, extra) "
                f"SELECT episode_id, idx, role, message_id, extra FROM turns WHERE episode_id IN ({ids})"))
        # A conversation's id is its founding episode's: one statement for those, one row at a
        # time for the episodes that are prefixes of another.
        conn.execute(sa.text("UPDATE episodes SET conversation_id = id WHERE trial_id IN "
                             f"({', '.join(map(str, chunk))}) AND id IN (SELECT id FROM conversations)"))
        others = [{"ep": e, "conv": c} for e, c in sorted(made.items()) if e != c]
        if others:
            conn.execute(episodes.update().where(episodes.c.id == sa.bindparam("ep"))
                         .values(conversation_id=sa.bindparam("conv")), others)
    if conn.dialect.name == "postgresql":
        # Conversation ids were episode ids: the sequence starts past both.
        op.execute("SELECT setval(pg_get_serial_sequence('conversations', 'id'), "
                   "greatest((SELECT max(id) FROM conversations), (SELECT max(id) FROM episodes), 1))")
    op.create_index(op.f("ix_conversation_turns_message_id"), "conversation_turns", ["message_id"])
    op.create_index(op.f("ix_episodes_conversation_id"), "episodes", ["conversation_id"])
    op.drop_table("turns")
    op.execute(TURNS_VIEW)
    op.execute(TURN_TEXT)


def downgrade() -> None:
    op.create_table(
        "turns_table",
        sa.Column("episode_id", Id, nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("message_id", Id),
        sa.Column("extra", Json),
        sa.PrimaryKeyConstraint("episode_id", "idx", name=op.f("pk_turns")),
        sa.ForeignKeyConstraint(["episode_id"], ["episodes.id"], name=op.f("fk_turns_episode_id_episodes")),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], name=op.f("fk_turns_message_id_messages")),
    )
    op.execute("INSERT INTO turns_table (episode_id, idx, role, message_id, extra) "
               "SELECT episode_id, idx, role, message_id, extra FROM turns")
    op.execute("DROP VIEW turn_text")
    op.execute("DROP VIEW turns")
    op.rename_table("turns_table", "turns")
    op.create_index(op.f("ix_turns_message_id"), "turns", ["message_id"])
    op.drop_index(op.f("ix_episodes_conversation_id"), "episodes")
    if op.get_bind().dialect.name == "sqlite":
        # SQLite drops no column a foreign key names: the table is copied, without the view
        # that reads it.
        op.execute("DROP VIEW trial_summary")
        with op.batch_alter_table("episodes") as batch:
            batch.drop_column("conversation_id")
        op.execute(TRIAL_SUMMARY)
    else:
        op.drop_constraint(op.f("fk_episodes_conversation_id_conversations"), "episodes", type_="foreignkey")
        op.drop_column("episodes", "conversation_id")
    op.drop_table("conversation_turns")
    op.drop_table("conversations")
    op.execute(TURN_TEXT)
