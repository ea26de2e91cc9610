-- Two runs side by side, per task. A run solves a task when one of its attempts succeeded
-- (reward >= --threshold); `flip` says how that changed from run --a to run --b. --flipped keeps
-- the flipped rows in Python (catalog._compare_post), so compare-test reads the same statement.
-- The slot reward is a trial's value (its reward, or --metric's key of its rewards), the slot kept the
-- trials --errors keeps (warehouse.queries.outcome).
WITH cell AS (
    SELECT tk.name AS task,
           sum(CASE WHEN r.run_key = :a THEN 1 ELSE 0 END) AS a_attempts,
           sum(CASE WHEN r.run_key = :a AND {reward} >= :threshold THEN 1 ELSE 0 END) AS a_successes,
           sum(CASE WHEN r.run_key = :b THEN 1 ELSE 0 END) AS b_attempts,
           sum(CASE WHEN r.run_key = :b AND {reward} >= :threshold THEN 1 ELSE 0 END) AS b_successes
    FROM trials tr
    JOIN runs r ON r.id = tr.run_id
    JOIN tasks tk ON tk.id = tr.task_id
    WHERE r.run_key IN (:a, :b) AND {filters} AND {kept}
    GROUP BY tk.name
), flips AS (
    SELECT cell.*,
           CASE WHEN a_attempts = 0 OR b_attempts = 0 THEN NULL
                WHEN a_successes = 0 AND b_successes > 0 THEN 'gained'
                WHEN a_successes > 0 AND b_successes = 0 THEN 'lost'
           END AS flip
    FROM cell
)
SELECT task, a_attempts, a_successes, b_attempts, b_successes, flip
FROM flips
ORDER BY task
