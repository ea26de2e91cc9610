"""Names the runs that the code before 0008 named by their key, a job UUID, as an ingest now names
them. That code named the run of trials whose folder holds no job files (`config.json` naming a
job UUID, no job `config.json`/`result.json` beside them) by its key; 0010 named only runs with
no name, so on an upgraded warehouse `--run <folder name>` found nothing where a fresh load finds
the run.

A run is renamed when its name is its key and its trials name that key as their job
(`trials.source_run_id`): a key that is a folder name or an `ingest --run` (no job UUID) is the
name an ingest gives it now too. The new name is the one its sources give it, by the rules of the
live code, copied here (revisions never import it): a trace directory's before any dataset's, and
of datasets the first by kind and URI (ingest.write.writer.name_source_runs, warehouse.runs.dataset_names):
- a trace directory (ingest.read.traces.run_name_for, _folder_name): the folder holding the first
  loaded trial, or for an RL `trace_jobs/` folder the folder above it;
- a Hub or Parquet dataset (warehouse.runs.source_run_name, as in 0010): the dataset's name, or
  with several runs in it the name and the first 8 characters of the key.
An `ingest --run NAME` given to the old code with such trials is not recorded anywhere: those runs
get the folder's name, which `warehouse runs rename` changes.

Downgrading keeps the names: the column is 0001's, and the older code reads any name.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    # Each such run's naming load (a trace directory's first, else the first dataset's), with its source.
    runs = bind.execute(sa.text("""
        SELECT r.id, r.run_key, s.id, s.kind, s.uri, s.name, l.unit
        FROM runs r
        JOIN loads l ON l.id = (SELECT tl.load_id FROM trials t JOIN trial_loads tl ON tl.trial_id = t.id
                                JOIN loads l2 ON l2.id = tl.load_id JOIN sources s2 ON s2.id = l2.source_id
                                WHERE t.run_id = r.id
                                ORDER BY s2.kind <> 'traces', s2.kind, s2.uri, tl.load_id LIMIT 1)
        JOIN sources s ON s.id = l.source_id
        WHERE r.name = r.run_key
          AND EXISTS (SELECT 1 FROM trials t WHERE t.run_id = r.id AND t.source_run_id = r.run_key)""")).all()
    for run_id, run_key, source_id, kind, uri, source_name, unit in runs:
        if kind == "traces":
            name = _folder_name(uri, unit)
        else:
            n_runs = bind.execute(sa.text("SELECT count(*) FROM run_sources WHERE source_id = :s"),
                                  {"s": source_id}).scalar()
            name = source_name if n_runs == 1 or run_key == source_name else f"{source_name}-{run_key[:8]}"
        if name and name != run_key:
            bind.execute(sa.text("UPDATE runs SET name = :n WHERE id = :id"), {"n": name, "id": run_id})


def _folder_name(uri: str, unit: str) -> str | None:
    """The folder holding the trial at `unit` (relative to the trace directory `uri`, which the
    ingest recorded resolved; `.` when the directory was the trial), or for an RL `trace_jobs/`
    folder the folder above it. Either separator: the warehouse may come from another system."""
    parts = [p for p in re.split(r"[\\/]+", f"{uri}/{unit}") if p not in ("", ".")]
    holder = parts[:-1]
    if len(holder) >= 2 and holder[-1] == "trace_jobs":
        return holder[-2]
    return holder[-1] if holder else None


def downgrade() -> None:
    pass
