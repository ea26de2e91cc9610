-- Attempts and successes of every task in every run that attempted it. A task is solved by a
-- run when at least one of its attempts succeeded (reward >= --threshold). The filters narrow the
-- trials, so runs_solved / runs_attempted count among the runs asked for. The slot reward is a
-- trial's value (its reward, or --metric's key of its rewards), the slot kept the trials --errors
-- keeps (warehouse.queries.outcome).
WITH cell AS (
    SELECT tk.name AS task, r.run_key,
           count(*) AS attempts,
           sum(CASE WHEN {reward} >= :threshold THEN 1 ELSE 0 END) AS successes
    FROM trials tr
    JOIN runs r ON r.id = tr.run_id
    JOIN tasks tk ON tk.id = tr.task_id
    WHERE {filters} AND {kept}
    GROUP BY tk.name, r.run_key
), per_task AS (
    SELECT task,
           count(*) AS runs_attempted,
           sum(CASE WHEN successes > 0 THEN 1 ELSE 0 END) AS runs_solved
    FROM cell
    GROUP BY task
)
SELECT c.task, c.run_key, c.attempts, c.successes, p.runs_solved, p.runs_attempted
FROM cell c
JOIN per_task p ON p.task = c.task
WHERE (:unsolved = 0 OR p.runs_solved = 0)
  AND (:solved_by_all = 0 OR p.runs_solved = p.runs_attempted)
ORDER BY c.task, c.run_key
