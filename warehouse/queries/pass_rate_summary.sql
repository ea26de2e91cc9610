-- pass_rate.sql from the summary table run_task_breakdown: the same columns and rows, one per
-- group and task. A model is its model_name (MODEL_NAME_SQL, a generated column of both tables).
-- The summaries hold the trials of an unknown task together; each is a cluster of its own, so
-- those (few) are read from the trials, through their task_id index. The counts are cast:
-- PostgreSQL sums bigints as numeric. The model is computed only when it is asked for: a
-- generated column, it costs SQLite an expression per row.
WITH g AS (
    SELECT b.run_id, b.agent, CASE WHEN :by = 'model' THEN b.model_name END AS model_name, b.task_id, CAST(NULL AS BIGINT) AS trial_id,
           b.n_trials AS trials, b.n_successes AS successes, b.reward_sum, b.n_rewards AS rewards,
           CASE WHEN b.exception_type IS NOT NULL THEN b.n_trials ELSE 0 END AS errors
    FROM run_task_breakdown b
    WHERE b.task_id IS NOT NULL AND {filters}
    UNION ALL
    SELECT tr.run_id, tr.agent, tr.model_name, tr.task_id, tr.id, 1,
           CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END,
           tr.reward,
           CASE WHEN tr.reward IS NULL THEN 0 ELSE 1 END,
           CASE WHEN tr.exception_type IS NULL THEN 0 ELSE 1 END
    FROM trials tr
    WHERE tr.task_id IS NULL AND {filters_trials}
)
SELECT
    CASE WHEN :by = 'model' THEN g.model_name WHEN :by = 'agent' THEN g.agent
         WHEN substr(:by, 1, 6) = 'label:' THEN l.value ELSE r.run_key END AS grp,
    g.task_id,
    CAST(sum(g.trials) AS BIGINT) AS trials,
    CAST(sum(g.successes) AS BIGINT) AS successes,
    sum(g.reward_sum) AS reward_sum,
    CAST(sum(g.rewards) AS BIGINT) AS rewards,
    CAST(sum(g.errors) AS BIGINT) AS errors
FROM g
JOIN runs r ON r.id = g.run_id
LEFT JOIN run_labels l ON l.run_id = g.run_id AND l.key = substr(:by, 7)
GROUP BY 1, g.task_id, g.trial_id
ORDER BY 1
