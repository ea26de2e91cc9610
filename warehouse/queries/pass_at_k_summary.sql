-- pass_at_k.sql from the summary table run_task_outcomes: the same columns and rows.
WITH per_task AS (
    SELECT CASE WHEN :by = 'run' THEN r.run_key ELSE l.value END AS grp, o.task_id,
           sum(o.n_trials) AS n, sum(o.n_successes) AS c
    FROM {outcomes} o
    JOIN runs r ON r.id = o.run_id
    LEFT JOIN run_labels l ON l.run_id = o.run_id AND l.key = substr(:by, 7)
    GROUP BY 1, o.task_id
)
SELECT p.grp, CASE WHEN :per_task = 1 THEN tk.name END AS task, p.n, p.c, count(*) AS tasks
FROM per_task p
JOIN tasks tk ON tk.id = p.task_id
GROUP BY p.grp, 2, p.n, p.c
ORDER BY p.grp, 2, p.n, p.c
