-- Attempts (n) and successes (c, reward >= --threshold) per run and task; pass@k is computed
-- from these in Python (see warehouse.queries.stats.pass_at_k).
SELECT r.run_key, tk.name AS task,
       count(*) AS n,
       sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS c
FROM trials tr
JOIN runs r ON r.id = tr.run_id
JOIN tasks tk ON tk.id = tr.task_id
GROUP BY r.run_key, tk.name
ORDER BY r.run_key, tk.name
