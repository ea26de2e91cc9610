"""Which column of a Hub row each trial field comes from: the fields a unit can disagree on
with the trial it names (a conflict records the unit's own value), and that an export of the
unit's source writes back from there."""

FIELD_COLUMNS = {"agent": "agent", "model": "model", "model_provider": "model_provider", "date_raw": "date",
                 "result": "result", "verifier_output": "verifier_output", "source_run_id": "run_id",
                 "instruction_id": "instruction"}
