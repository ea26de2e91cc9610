-- compare.sql from the summary table run_task_outcomes: the same columns and rows.
WITH cell AS (
    SELECT o.task_id,
           sum(CASE WHEN r.run_key = :a THEN o.n_trials ELSE 0 END) AS a_attempts,
           sum(CASE WHEN r.run_key = :a THEN o.n_successes ELSE 0 END) AS a_successes,
           sum(CASE WHEN r.run_key = :b THEN o.n_trials ELSE 0 END) AS b_attempts,
           sum(CASE WHEN r.run_key = :b THEN o.n_successes ELSE 0 END) AS b_successes
    FROM {outcomes} o
    JOIN runs r ON r.id = o.run_id
    WHERE r.run_key IN (:a, :b) AND o.task_id IS NOT NULL
    GROUP BY o.task_id
), flips AS (
    SELECT tk.name AS task, cell.*,
           CASE WHEN a_attempts = 0 OR b_attempts = 0 THEN NULL
                WHEN a_successes = 0 AND b_successes > 0 THEN 'gained'
                WHEN a_successes > 0 AND b_successes = 0 THEN 'lost'
           END AS flip
    FROM cell
    JOIN tasks tk ON tk.id = cell.task_id
)
SELECT task, a_attempts, a_successes, b_attempts, b_successes, flip
FROM flips
ORDER BY task
