-- Attempts (n) and successes (c, reward >= --threshold) per run and task; pass@k is computed
-- from these in Python (see warehouse.queries.stats.pass_at_k). A task's pass@k depends only on
-- its (n, c), so without --per-task the tasks are counted per (n, c) rather than listed: a few
-- rows per run for the per-run means instead of one per task.
WITH cell AS (
    SELECT tr.run_id, tr.task_id,
           count(*) AS n,
           sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS c
    FROM trials tr
    WHERE tr.task_id IS NOT NULL AND {filters}
    GROUP BY tr.run_id, tr.task_id
)
SELECT r.run_key, CASE WHEN :per_task = 1 THEN tk.name END AS task, cell.n, cell.c,
       count(*) AS tasks
FROM cell
JOIN runs r ON r.id = cell.run_id
JOIN tasks tk ON tk.id = cell.task_id
GROUP BY r.run_key, 2, cell.n, cell.c
ORDER BY r.run_key, 2, cell.n, cell.c
