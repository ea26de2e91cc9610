"""The lake: the warehouse's tables as Parquet files that DuckDB, Spark and other engines read
where they lie (`warehouse lake sync`, `warehouse export tables`), and the canned queries
answered there."""
