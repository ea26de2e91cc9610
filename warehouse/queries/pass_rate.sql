-- Pass rate grouped by run, model or agent (--by). A trial succeeds when reward >= --threshold;
-- a trial without a reward is an attempt that failed. A model is its model_name: `model` without
-- its provider prefix, so one model served by several providers is one group.
SELECT
    CASE :by WHEN 'model' THEN tr.model_name WHEN 'agent' THEN tr.agent ELSE r.run_key END AS grp,
    count(*) AS trials,
    sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS successes,
    CAST(sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS DOUBLE PRECISION)
        / count(*) AS pass_rate,
    avg(tr.reward) AS mean_reward,
    count(tr.exception_type) AS errors
FROM trials tr
JOIN runs r ON r.id = tr.run_id
GROUP BY 1
ORDER BY 1
