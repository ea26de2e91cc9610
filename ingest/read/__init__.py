"""The readers: a SOURCE resolved to files (`sources`), Hub Parquet shards (`hub`), Harbor trace
directories (`traces`, rendering ATIF with `atif`, reading files safely with `trace_files`,
within `limits`). They yield `ingest.shape` records or prepared batches and never touch the
database."""
