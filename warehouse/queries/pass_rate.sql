-- Pass rate grouped by run, model or agent (--by). A trial succeeds when reward >= --threshold;
-- a trial without a reward is an attempt that failed. A model is its model_name: `model` without
-- its provider prefix, so one model served by several providers is one group. `label:KEY` groups
-- the runs by their label KEY (runs without it: NULL), ordered as numbers in Python.
-- One row per group and task, the clusters of the intervals (catalog._pass_rate_post sums them
-- per group); a trial whose task is unknown is a cluster of its own.
-- The slot reward is a trial's value (its reward, or --metric's key of its rewards), the slot kept the
-- trials --errors keeps (warehouse.queries.outcome).
SELECT
    CASE WHEN :by = 'model' THEN tr.model_name WHEN :by = 'agent' THEN tr.agent
         WHEN substr(:by, 1, 6) = 'label:' THEN l.value ELSE r.run_key END AS grp,
    tr.task_id,
    count(*) AS trials,
    sum(CASE WHEN {reward} >= :threshold THEN 1 ELSE 0 END) AS successes,
    sum({reward}) AS reward_sum,
    count({reward}) AS rewards,
    count(tr.exception_type) AS errors
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN run_labels l ON l.run_id = r.id AND l.key = substr(:by, 7)
WHERE {filters} AND {kept}
GROUP BY 1, tr.task_id, CASE WHEN tr.task_id IS NULL THEN tr.id END
ORDER BY 1
