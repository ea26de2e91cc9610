-- power.sql from the summary table run_task_breakdown: the same columns and rows. A model is its
-- name without a provider prefix (warehouse.db.models.MODEL_NAME_SQL's expression). The counts
-- are cast: PostgreSQL sums bigints as numeric.
WITH per_task AS (
    SELECT CASE WHEN :by = 'model' THEN substr(b.model, length(rtrim(b.model, replace(b.model, '/', ''))) + 1)
                WHEN :by = 'agent' THEN b.agent
                WHEN substr(:by, 1, 6) = 'label:' THEN l.value ELSE r.run_key END AS grp,
           b.task_id,
           CAST(sum(b.n_trials) AS BIGINT) AS n,
           CAST(sum(b.n_successes) AS BIGINT) AS c
    FROM run_task_breakdown b
    JOIN runs r ON r.id = b.run_id
    LEFT JOIN run_labels l ON l.run_id = b.run_id AND l.key = substr(:by, 7)
    WHERE b.task_id IS NOT NULL AND {filters}
    GROUP BY 1, b.task_id
)
SELECT grp, n, c, count(*) AS tasks
FROM per_task
GROUP BY grp, n, c
ORDER BY grp, n, c
