-- failures.sql from the summary tables run_task_breakdown and run_task_outcomes: the same
-- columns and rows.
SELECT r.run_key, b.exception_type,
       sum(b.n_trials) AS trials,
       count(DISTINCT b.task_id) AS tasks,
       CAST(sum(b.n_trials) AS DOUBLE PRECISION)
           / (SELECT sum(o.n_trials) FROM {outcomes} o WHERE o.run_id = r.id) AS share
FROM run_task_breakdown b
JOIN runs r ON r.id = b.run_id
WHERE b.exception_type IS NOT NULL AND {filters}
GROUP BY r.id, r.run_key, b.exception_type
ORDER BY r.run_key, sum(b.n_trials) DESC, b.exception_type
