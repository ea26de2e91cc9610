"""The ingesters: sources in, rows out, one way (design.md §2: reader → records → writer).

- `ingest.read`: the readers. They know formats (Hub Parquet shards, Harbor trace directories,
  ATIF trajectories) and where a SOURCE's files are, never the database.
- `ingest.shape`: the records every reader produces and the writer consumes, and their preparing
  (hashes, stored texts, row tuples) before the database is reached.
- `ingest.write`: the writer. It knows SQL and the two backends, never a file format.
- `ingest.process`: how the work runs (a reader process, read-ahead, the garbage collector
  paused), knowing nothing of what is read or written.

The orchestration is here, at the top: `pipeline.ingest` (the entry point) resolves the sources
and writes Hub shards; `trace_pipeline` writes trace directories; `report` is what an ingest
tells its caller. Nothing is imported here: the CLI's read commands never load this package.
"""
