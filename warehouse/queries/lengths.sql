-- One row per trial: the turns and characters of its longest main episode (its whole
-- trajectory: an export of every episode repeats the earlier ones as prefixes) and its tokens.
-- Percentiles per run are computed from these in Python.
WITH ranked AS (
    SELECT e.trial_id, e.n_turns, e.n_chars,
           row_number() OVER (PARTITION BY e.trial_id
                              ORDER BY e.n_turns DESC, e.episode_index DESC) AS pick
    FROM episodes e
    WHERE e.trace_source = 'main'
)
SELECT r.run_key,
       ep.n_turns AS turns,
       ep.n_chars AS chars,
       tr.n_input_tokens AS input_tokens,
       tr.n_output_tokens AS output_tokens
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN ranked ep ON ep.trial_id = tr.id AND ep.pick = 1
ORDER BY r.run_key
