-- pass_rate.sql from the summary table run_task_breakdown: the same columns and rows. Summed
-- per run, agent and raw model first (in the order of the covering index
-- ix_run_task_breakdown_groups; grouping by the generated model_name here would read every row),
-- then into the groups asked for, a model by its name without a provider prefix (the expression
-- of warehouse.db.models.MODEL_NAME_SQL). The counts are cast: PostgreSQL sums g's bigints as
-- numeric, which would reach the answer as floats (928.0).
WITH g AS (
    SELECT b.run_id, b.agent, b.model,
           sum(b.n_trials) AS trials,
           sum(b.n_successes) AS successes,
           sum(b.reward_sum) AS reward_sum,
           sum(b.n_rewards) AS rewards,
           sum(CASE WHEN b.exception_type IS NOT NULL THEN b.n_trials ELSE 0 END) AS errors
    FROM run_task_breakdown b
    WHERE {filters}
    GROUP BY b.run_id, b.agent, b.model
)
SELECT
    CASE WHEN :by = 'model' THEN substr(g.model, length(rtrim(g.model, replace(g.model, '/', ''))) + 1)
         WHEN :by = 'agent' THEN g.agent
         WHEN substr(:by, 1, 6) = 'label:' THEN l.value
         ELSE r.run_key END AS grp,
    CAST(sum(g.trials) AS BIGINT) AS trials,
    CAST(sum(g.successes) AS BIGINT) AS successes,
    CAST(sum(g.successes) AS DOUBLE PRECISION) / sum(g.trials) AS pass_rate,
    sum(g.reward_sum) / NULLIF(sum(g.rewards), 0) AS mean_reward,
    CAST(sum(g.errors) AS BIGINT) AS errors
FROM g
JOIN runs r ON r.id = g.run_id
LEFT JOIN run_labels l ON l.run_id = g.run_id AND l.key = substr(:by, 7)
GROUP BY 1
ORDER BY 1
