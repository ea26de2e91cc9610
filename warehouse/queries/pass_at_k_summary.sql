-- pass_at_k.sql from the summary table run_task_outcomes: the same columns and rows.
SELECT r.run_key, CASE WHEN :per_task = 1 THEN tk.name END AS task, o.n_trials AS n,
       o.n_successes AS c, count(*) AS tasks
FROM {outcomes} o
JOIN runs r ON r.id = o.run_id
JOIN tasks tk ON tk.id = o.task_id
GROUP BY r.run_key, 2, o.n_trials, o.n_successes
ORDER BY r.run_key, 2, o.n_trials, o.n_successes
