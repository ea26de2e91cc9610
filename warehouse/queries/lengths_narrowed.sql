-- lengths.sql's rows from the summary table trial_lengths, for a query narrowed by --task,
-- --model or --agent: trial_lengths knows each trial's run but not its task, model or agent,
-- which the trials' own columns give (no episode is read). Percentiles in Python, as lengths.sql.
SELECT r.run_key, tl.turns, tl.chars, tl.input_tokens, tl.output_tokens
FROM trial_lengths tl
JOIN trials tr ON tr.id = tl.trial_id
JOIN runs r ON r.id = tl.run_id
WHERE {filters}
ORDER BY r.run_key
