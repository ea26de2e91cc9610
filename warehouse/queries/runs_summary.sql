-- runs.sql from the summary tables (run_task_outcomes, run_task_breakdown, run_sources): the
-- same columns and rows; the outcomes it reads are narrowed by the filters (registry.py).
SELECT
    r.run_key,
    r.name,
    coalesce(sum(o.n_trials), 0) AS trials,
    coalesce(sum(o.n_complete), 0) AS complete,
    coalesce(sum(o.n_incomplete), 0) AS incomplete,
    CAST(sum(o.n_successes) AS DOUBLE PRECISION) / NULLIF(sum(o.n_trials), 0) AS pass_rate,
    sum(o.reward_sum) / NULLIF(sum(o.n_rewards), 0) AS mean_reward,
    coalesce(sum(o.n_errors), 0) AS errors,
    (SELECT string_agg(a.agent, ', ')
       FROM (SELECT DISTINCT b.agent FROM run_task_breakdown b
              WHERE b.run_id = r.id AND b.agent IS NOT NULL AND {filters_b} ORDER BY b.agent) a) AS agents,
    (SELECT string_agg(m.model, ', ')
       FROM (SELECT DISTINCT b.model FROM run_task_breakdown b
              WHERE b.run_id = r.id AND b.model IS NOT NULL AND {filters_b} ORDER BY b.model) m) AS models,
    min(o.first_started) AS first_started,
    max(o.last_started) AS last_started,
    (SELECT string_agg(s.name, ', ')
       FROM (SELECT DISTINCT src.name FROM run_sources rs
               JOIN sources src ON src.id = rs.source_id
              WHERE rs.run_id = r.id ORDER BY src.name) s) AS sources
FROM runs r
LEFT JOIN {outcomes} o ON o.run_id = r.id
WHERE {filters_runs}
GROUP BY r.id, r.run_key, r.name
HAVING {trials_narrowed} = 0 OR count(o.run_id) > 0
ORDER BY r.run_key
