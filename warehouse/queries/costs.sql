-- One row per trial: its group (--by, as pass_rate.sql groups) and its cost and token counts, NULL
-- where the trial has none. Sums, means and p90 per group are computed from these in Python
-- (catalog._costs_post), over the trials that have each value. No summary table holds cache
-- tokens or costs: the trials are read, by their run where --run narrows them.
SELECT CASE WHEN :by = 'model' THEN tr.model_name WHEN :by = 'agent' THEN tr.agent
            WHEN substr(:by, 1, 6) = 'label:' THEN l.value ELSE r.run_key END AS grp,
       tr.cost_usd,
       tr.n_input_tokens AS input_tokens,
       tr.n_output_tokens AS output_tokens,
       tr.n_cache_tokens AS cache_tokens
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN run_labels l ON l.run_id = r.id AND l.key = substr(:by, 7)
WHERE {filters}
ORDER BY 1
