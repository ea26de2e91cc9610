-- Attempts (n) and successes (c, reward >= --threshold) per group (--by, as pass_rate.sql groups)
-- and task, the tasks counted per (n, c): the variances and the design's figures are computed
-- from these in Python (warehouse.queries.power). A task's attempts in every run of a group
-- are pooled. Trials whose task is unknown are left out.
WITH per_task AS (
    SELECT CASE WHEN :by = 'model' THEN tr.model_name WHEN :by = 'agent' THEN tr.agent
                WHEN substr(:by, 1, 6) = 'label:' THEN l.value ELSE r.run_key END AS grp,
           tr.task_id,
           count(*) AS n,
           sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS c
    FROM trials tr
    JOIN runs r ON r.id = tr.run_id
    LEFT JOIN run_labels l ON l.run_id = r.id AND l.key = substr(:by, 7)
    WHERE tr.task_id IS NOT NULL AND {filters}
    GROUP BY 1, tr.task_id
)
SELECT grp, n, c, count(*) AS tasks
FROM per_task
GROUP BY grp, n, c
ORDER BY grp, n, c
