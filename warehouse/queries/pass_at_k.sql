-- Attempts (n) and successes (c, reward >= --threshold) per run (or, with --by label:KEY, per
-- value of the label: the attempts of the runs that carry it pooled) and task; pass@k is
-- computed from these in Python (see warehouse.queries.stats.pass_at_k). A task's pass@k
-- depends only on its (n, c), so without --per-task the tasks are counted per (n, c) rather than
-- listed: a few rows per group for the means instead of one per task.
-- The slot reward is a trial's value (its reward, or --metric's key of its rewards), the slot kept the
-- trials --errors keeps (warehouse.queries.outcome).
WITH cell AS (
    SELECT CASE WHEN :by = 'run' THEN r.run_key ELSE l.value END AS grp, tr.task_id,
           count(*) AS n,
           sum(CASE WHEN {reward} >= :threshold THEN 1 ELSE 0 END) AS c
    FROM trials tr
    JOIN runs r ON r.id = tr.run_id
    LEFT JOIN run_labels l ON l.run_id = tr.run_id AND l.key = substr(:by, 7)
    WHERE tr.task_id IS NOT NULL AND {filters} AND {kept}
    GROUP BY 1, tr.task_id
)
SELECT cell.grp, CASE WHEN :per_task = 1 THEN tk.name END AS task, cell.n, cell.c,
       count(*) AS tasks
FROM cell
JOIN tasks tk ON tk.id = cell.task_id
GROUP BY cell.grp, 2, cell.n, cell.c
ORDER BY cell.grp, 2, cell.n, cell.c
