-- Exception types by run: how many trials ended with each, on how many tasks, and their share
-- of the run's trials (those the filters leave).
SELECT r.run_key, tr.exception_type,
       count(*) AS trials,
       count(DISTINCT tr.task_id) AS tasks,
       CAST(count(*) AS DOUBLE PRECISION)
           / (SELECT count(*) FROM trials t2 WHERE t2.run_id = r.id AND {filters_t2}) AS share
FROM trials tr
JOIN runs r ON r.id = tr.run_id
WHERE tr.exception_type IS NOT NULL AND {filters}
GROUP BY r.id, r.run_key, tr.exception_type
ORDER BY r.run_key, count(*) DESC, tr.exception_type
