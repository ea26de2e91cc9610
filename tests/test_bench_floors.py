"""The benchmark's floors store what the warehouse stores: the same rows of every table the
floor writes (conversations stored once included), in a database the migrations made, on both
backends. A floor that no longer fits the schema would fail the benchmark, not a test."""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.floors import normalize, postgres_floor, sqlite_floor
from ingest.pipeline import ingest
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
COUNTED = ("runs", "tasks", "trials", "episodes", "conversations", "conversation_turns", "turns", "messages")


def _counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in COUNTED}


def test_a_floor_writes_the_rows_an_ingest_writes(backend, db_url, engine, tmp_path):
    shards = sorted((SAMPLE / "data").glob("*.parquet"))
    rows = normalize(shards, "sample")
    if backend == "sqlite":
        floor_db = tmp_path / "floor.db"
        shutil.copy(make_url(db_url).database, floor_db)  # a warehouse at head, still empty
        sqlite_floor(rows, floor_db)
        floor = make_engine(resolve_url(f"sqlite:///{floor_db}"))
    else:
        postgres_floor(rows, make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False))
        floor = engine
    floor_counts = _counts(floor)
    floor.dispose()

    ours = make_engine(resolve_url(f"sqlite:///{tmp_path / 'ours.db'}"))
    schema.upgrade(ours)
    assert ingest(ours, [str(SAMPLE)]).errors == []
    assert floor_counts == _counts(ours)
    ours.dispose()
