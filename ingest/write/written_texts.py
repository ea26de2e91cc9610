"""The texts a warehouse may hold when this process wrote every one of them: a filter of their
hashes, so that a unit looks up by hash only the texts it may find.

A unit into a warehouse without texts looks none up (UnitWriter._fresh). Every later unit of a
first load looked up each of its texts not in its own cache, and on the math profile 96 % of
them were new: at 20× (1.2 M texts) each such lookup was a descent through a hash index of
57 MB, out of the processor's caches, and the lookups of a unit grew from 0 to 0.25 s. The
process that began writing a warehouse with no texts knows every text it holds, as long as no
other writer has added one since: the filter answers "certainly new" without a descent, and
"maybe stored" (every stored text, and about one new text in ten) is looked up as before.

Trust is checked at each unit's start, under the write lock: the largest message id and the
largest load id must be what they were when this process's last unit committed (`mark`); any
other writer's unit adds a load and its texts new ids. A unit that fails leaves hashes in the
filter that are not stored, which only costs lookups. Should the check ever be fooled, the unique
index on the hash refuses the second copy of a text: the unit fails, nothing is stored twice.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, text

# The table keeps at least this many one-bit slots a text (grown to twice as many when it would
# hold fewer): a new text finds its slot set, and is looked up, 6 to 12 % of the time.
SLOTS_PER_TEXT = 8
FIRST_SLOTS = 1 << 16
# Past this many texts the filter is dropped and every unit looks its texts up (memory: 4 bytes
# and 8 to 16 one-bit slots a text, at most some 50 MB).
MAX_TEXTS = 1 << 23


class WrittenTexts:
    """The hashes of the texts written, as one bit a slot: a text whose slot is clear was never
    written. Python's hash of each bytes key picks the slot (computed once per key, and cached by
    the key itself, which has been a dict key by then); the low 32 bits of each are kept, to fill
    a larger table when this one fills up."""

    def __init__(self) -> None:
        self._hashes = array("I")
        self._bits = bytearray(FIRST_SLOTS // 8)
        self._mask = FIRST_SLOTS - 1
        self.full = False  # past MAX_TEXTS: holds nothing, answers "maybe" for every text

    def __len__(self) -> int:
        return len(self._hashes)

    def may_hold(self, hashes: Collection[bytes]) -> list[bytes]:
        """The hashes written, and some others; never leaves out one that was written."""
        if self.full:
            return list(hashes)
        bits, mask = self._bits, self._mask
        return [h for h in hashes if bits[(slot := hash(h) & mask) >> 3] >> (slot & 7) & 1]

    def add(self, hashes: Collection[bytes]) -> None:
        if self.full:
            return
        if len(self._hashes) + len(hashes) > MAX_TEXTS:
            self.full = True
            self._hashes, self._bits = array("I"), bytearray()
            return
        values = [hash(h) & 0xFFFFFFFF for h in hashes]
        self._hashes.extend(values)
        if len(self._hashes) * SLOTS_PER_TEXT > len(self._bits) * 8:
            slots = len(self._bits) * 8
            while slots < 2 * SLOTS_PER_TEXT * len(self._hashes):
                slots *= 2
            self._bits, self._mask = bytearray(slots // 8), slots - 1
            values = self._hashes
        bits, mask = self._bits, self._mask
        for value in values:
            slot = value & mask
            bits[slot >> 3] |= 1 << (slot & 7)


# Each engine's filter, with the warehouse's mark when the last unit that added to it committed.
_FILTERS: WeakKeyDictionary[Engine, tuple[WrittenTexts, tuple]] = WeakKeyDictionary()


def for_unit(conn: Connection, load_id: int, empty: bool) -> WrittenTexts | None:
    """At the start of the unit `load_id`, under the write lock: the filter its lookups of texts
    may trust, or None. `empty`: the warehouse holds no text, and the unit starts a filter."""
    if empty:
        return WrittenTexts()
    kept = _FILTERS.get(conn.engine)
    if kept is None:
        return None
    texts, mark_then = kept
    if mark(conn, load_id) != mark_then:
        del _FILTERS[conn.engine]  # another writer wrote: looked up from now on
        return None
    return texts


def mark(conn: Connection, unit: int | None = None) -> tuple:
    """The largest message id and the largest load id (but the unit `unit`'s own)."""
    return tuple(conn.execute(text(
        "SELECT (SELECT max(id) FROM messages), (SELECT max(id) FROM loads WHERE id <> :unit)"),
        {"unit": -1 if unit is None else unit}).one())


def committed(engine: Engine, texts: WrittenTexts | None, mark_now: tuple | None) -> None:
    """After a unit that used `texts` committed with the warehouse at `mark_now` (taken when
    there were `texts`): kept for the next unit."""
    if texts is not None and not texts.full:
        _FILTERS[engine] = (texts, mark_now)
