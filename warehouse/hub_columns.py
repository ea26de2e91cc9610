"""Which column of a Hub row each trial field comes from: the fields a unit can disagree on
with the trial it names (a conflict records the unit's own value), and that an export of the
unit's source writes back from there."""

FIELD_COLUMNS = {"agent": "agent", "model": "model", "model_provider": "model_provider", "date_raw": "date",
                 "result": "result", "verifier_output": "verifier_output", "source_run_id": "run_id",
                 "instruction_id": "instruction"}

# The files a dataset's rows may come in, as the Hub's own loaders read them: Parquet, a JSON
# list of row objects, JSON Lines (one object a line); the JSON kinds also gzip-compressed.
PARQUET_SUFFIX = ".parquet"
JSON_LIST_SUFFIXES = (".json",)
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
GZIP_SUFFIX = ".gz"


def json_rows_kind(name: str) -> str | None:
    """"list" (a JSON list of rows), "lines" (JSON Lines) or None, by a file's name."""
    lower = name.lower().removesuffix(GZIP_SUFFIX)
    if lower.endswith(JSON_LINES_SUFFIXES):
        return "lines"
    if lower.endswith(JSON_LIST_SUFFIXES):
        return "list"
    return None


def rows_stem(name: str) -> str:
    """A rows file's name without its kind's suffixes (`train.jsonl.gz`: `train`)."""
    lower = name.lower()
    for suffix in (PARQUET_SUFFIX, *(s + GZIP_SUFFIX for s in JSON_LINES_SUFFIXES + JSON_LIST_SUFFIXES),
                   *JSON_LINES_SUFFIXES, *JSON_LIST_SUFFIXES):
        if lower.endswith(suffix):
            return name[:len(name) - len(suffix)]
    return name


def parquet_name(name: str) -> str:
    """The file an export writes a shard's rows back to: its own name, a JSON one as Parquet."""
    return name if name.lower().endswith(PARQUET_SUFFIX) else rows_stem(name) + PARQUET_SUFFIX
