-- solve_matrix.sql from the summary table run_task_outcomes: the same columns and rows.
WITH per_task AS (
    SELECT o.task_id,
           count(*) AS runs_attempted,
           sum(CASE WHEN o.n_successes > 0 THEN 1 ELSE 0 END) AS runs_solved
    FROM {outcomes} o
    WHERE o.task_id IS NOT NULL
    GROUP BY o.task_id
)
SELECT tk.name AS task, r.run_key, o.n_trials AS attempts, o.n_successes AS successes,
       p.runs_solved, p.runs_attempted
FROM per_task p
JOIN {outcomes} o ON o.task_id = p.task_id
JOIN tasks tk ON tk.id = p.task_id
JOIN runs r ON r.id = o.run_id
WHERE (:unsolved = 0 OR p.runs_solved = 0)
  AND (:solved_by_all = 0 OR p.runs_solved = p.runs_attempted)
ORDER BY tk.name, r.run_key
