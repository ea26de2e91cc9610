-- One row per trial: the turns and characters of its own conversations and its tokens. A
-- conversation is the trial's main trace, or one step of a multi-step trial ("step:<name>", or
-- "main#<n>" from a Harbor export read alone); subagents are not counted. Each conversation's longest episode is its whole trajectory (an
-- export of every episode repeats the earlier ones as prefixes); a trial's length is the sum
-- over its conversations. Percentiles per run are computed from these in Python.
WITH ranked AS (
    SELECT e.trial_id, e.n_turns, e.n_chars,
           row_number() OVER (PARTITION BY e.trial_id, e.trace_source
                              ORDER BY e.n_turns DESC, e.episode_index DESC) AS pick
    FROM episodes e
    WHERE e.trace_source = 'main' OR substr(e.trace_source, 1, 5) = 'main#'
       OR (substr(e.trace_source, 1, 5) = 'step:' AND e.trace_source NOT LIKE '%/%')
), own AS (
    SELECT trial_id, sum(n_turns) AS turns, sum(n_chars) AS chars
    FROM ranked
    WHERE pick = 1
    GROUP BY trial_id
)
SELECT r.run_key,
       own.turns,
       own.chars,
       tr.n_input_tokens AS input_tokens,
       tr.n_output_tokens AS output_tokens
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN own ON own.trial_id = tr.id
WHERE {filters}
ORDER BY r.run_key
