-- Per run: how many trials have each length measure (turns and chars come from the same
-- episodes, so they share a count). The percentiles are then read by rank from trial_lengths'
-- per-run indexes (lengths_ranks.sql), in Python: no portable SQL picks a rank per group fast.
-- trial_lengths knows runs, not tasks: narrowed by --task, --model or --agent, lengths_narrowed.sql
-- answers.
SELECT r.run_key, r.id AS run_id,
       sum(o.n_with_trajectory) AS turns,
       sum(o.n_with_trajectory) AS chars,
       sum(o.n_with_input_tokens) AS input_tokens,
       sum(o.n_with_output_tokens) AS output_tokens
FROM run_task_outcomes o
JOIN runs r ON r.id = o.run_id
WHERE {filters_runs}
GROUP BY r.id, r.run_key
ORDER BY r.run_key
